// Command render executes a Helm chart's templates the way `helm template` does, for the
// chart tests in an environment without helm: Go text/template with the sprig function
// library (what Helm uses), plus Helm's own functions this project's charts call
// (include, toYaml, required) and Helm's built-in objects (.Values, .Release, .Chart,
// .Template, .Capabilities). It is NOT helm: no hooks ordering, no CRD installation, no
// schema validation, no lookup against a cluster. Only the template engine is the same.
//
// Usage: render CHART_DIR RELEASE NAMESPACE [VALUES.yaml ...]
// Prints every rendered manifest as "---\n# Source: <chart>/templates/<file>\n...".
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: render CHART_DIR RELEASE NAMESPACE [VALUES.yaml ...]")
		os.Exit(2)
	}
	out, err := render(os.Args[1], os.Args[2], os.Args[3], os.Args[4:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

func readYAML(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// merge overlays src onto dst the way `helm -f` coalesces values: maps merge, the rest
// (lists included) is replaced.
func merge(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

func render(chartDir, release, namespace string, valueFiles []string) (string, error) {
	meta, err := readYAML(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	values, err := readYAML(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range valueFiles {
		extra, err := readYAML(f)
		if err != nil {
			return "", err
		}
		values = merge(values, extra)
	}
	chartName := fmt.Sprint(meta["name"])
	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)

	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	// Helm removes these two for safety; a chart that used them would break under helm.
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["lookup"] = func(...string) (map[string]interface{}, error) { return map[string]interface{}{}, nil }
	root.Funcs(funcs).Option("missingkey=zero")

	names := []string{}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		name := chartName + "/templates/" + filepath.Base(f)
		if _, err := root.New(name).Parse(string(text)); err != nil {
			return "", err
		}
		names = append(names, name)
	}

	var out strings.Builder
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") || strings.HasSuffix(base, ".txt") {
			continue
		}
		data := map[string]interface{}{
			"Values": values,
			"Release": map[string]interface{}{
				"Name": release, "Namespace": namespace, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Chart": map[string]interface{}{
				"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"],
			},
			"Template":     map[string]interface{}{"Name": name, "BasePath": chartName + "/templates"},
			"Capabilities": map[string]interface{}{"KubeVersion": map[string]interface{}{"Version": "v1.37.2"}},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		// Helm prints missing values as empty, not "<no value>".
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, text)
	}
	return out.String(), nil
}
