// The chart tests' template renderer (see main.go). Versions are those the Kubernetes
// build already put in the Go module cache, so it builds offline (GOPROXY=off).
module kube-offload.io/charts/tools/render

go 1.26

require (
	github.com/Masterminds/sprig/v3 v3.3.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	dario.cat/mergo v1.0.1 // indirect
	github.com/Masterminds/goutils v1.1.1 // indirect
	github.com/Masterminds/semver/v3 v3.4.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/huandu/xstrings v1.5.0 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/shopspring/decimal v1.4.0 // indirect
	github.com/spf13/cast v1.7.0 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/crypto v0.48.0 // indirect
)

replace gopkg.in/check.v1 => ./offline-stubs/check.v1
