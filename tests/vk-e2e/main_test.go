// Package vke2e runs virtual-kubelet's own end-to-end suite (the package
// github.com/virtual-kubelet/virtual-kubelet/test/e2e, as the Go module proxy serves it,
// unmodified) against a kube-offload virtual node.
//
// The suite talks to a cluster only through the Kubernetes API: it creates pods bound to
// the node by name, watches them become Ready and reads the node's kubelet API through
// the API server's node proxy (/pods, /runningpods/). That is the protocol any kubelet
// speaks, so kube-offload's virtual kubelet must pass it. A few tests check what
// virtual-kubelet's own library or CI deployment does instead; those are skipped below,
// each with its reason, which is printed next to the skip.
//
// tests/e2e/test_virtual_kubelet_suite.py builds this package into a test binary
// (kube_offload_harness/vk_suite.py) and runs it against the e2e environment, with the
// namespace prepared (offloaded, its pods given the virtual node's toleration);
// docs/testing.md says how to run it by hand.
package vke2e

import (
	"flag"
	"fmt"
	"sort"
	"testing"
	"time"

	vke2e "github.com/virtual-kubelet/virtual-kubelet/test/e2e"
)

var (
	kubeconfig   = flag.String("kubeconfig", "", "kubeconfig of the local (consumer) cluster, whose virtual node is tested")
	namespace    = flag.String("namespace", "", "an existing namespace offloaded to the node, where the suite creates its pods")
	nodeName     = flag.String("node-name", "", "the virtual node (kube-offload-<cluster id>)")
	watchTimeout = flag.Duration("watch-timeout", 2*time.Minute, "how long the suite waits for a pod or node condition")
)

// notTheProtocol names the suite's tests that check something other than the kubelet
// protocol, and why. Every other test must pass.
var notTheProtocol = map[string]string{
	// virtual-kubelet's library resolves env from ConfigMaps and Secrets itself and
	// records Events with reasons of its own (internal/podutils: OptionalSecretNotFound,
	// MandatoryConfigMapNotFound, ...), which the tests wait for. A kubelet records no
	// such reasons, and neither does kube-offload: the remote kubelet resolves the env of
	// the remote pod from the reflected objects.
	"TestCreatePodWithOptionalInexistentSecrets":    "waits for virtual-kubelet's library Event reason OptionalSecretNotFound",
	"TestCreatePodWithMandatoryInexistentSecrets":   "waits for virtual-kubelet's library Event reason MandatorySecretNotFound",
	"TestCreatePodWithOptionalInexistentConfigMap":  "waits for virtual-kubelet's library Event reason OptionalConfigMapNotFound",
	"TestCreatePodWithMandatoryInexistentConfigMap": "waits for virtual-kubelet's library Event reason MandatoryConfigMapNotFound",
	// These two reach the kubelet API as pods/https:<node>:10250/proxy in the test
	// namespace: through a pod named like the node, listening on 10250, which exists
	// where virtual-kubelet's CI runs its mock provider as that pod (hack/skaffold). A
	// kube-offload virtual node is no such pod; its /stats/summary and /metrics/resource
	// are checked on the kubelet port and through metrics-server by
	// tests/e2e/test_kubelet_api_auth.py, test_metrics.py and tests/realnode/test_offloaded_pods.py.
	"TestGetStatsSummary":    "reads /stats/summary through a pod named like the node (virtual-kubelet's CI deployment), not the node proxy",
	"TestGetMetricsResource": "reads /metrics/resource through a pod named like the node (virtual-kubelet's CI deployment), not the node proxy",
}

func shouldSkip(test string) bool {
	reason, skip := notTheProtocol[test]
	if skip {
		// The suite's own skip message does not say why; this line, printed just
		// before it, does.
		fmt.Printf("kube-offload: skipping %s: %s\n", test, reason)
	}
	return skip
}

// TestEndToEnd is virtual-kubelet's suite, one subtest per test of it.
func TestEndToEnd(t *testing.T) {
	for _, required := range []struct{ flag, value string }{
		{"-kubeconfig", *kubeconfig}, {"-namespace", *namespace}, {"-node-name", *nodeName},
	} {
		if required.value == "" {
			t.Fatalf("%s is required (see docs/testing.md, \"virtual-kubelet's own e2e suite\")", required.flag)
		}
	}
	names := make([]string, 0, len(notTheProtocol))
	for name := range notTheProtocol {
		names = append(names, name)
	}
	sort.Strings(names)
	t.Logf("node %s, namespace %s; not the kubelet protocol, skipped: %v", *nodeName, *namespace, names)
	suite := vke2e.NewEndToEndTestSuite(vke2e.EndToEndTestSuiteConfig{
		Kubeconfig:     *kubeconfig,
		Namespace:      *namespace,
		NodeName:       *nodeName,
		WatchTimeout:   *watchTimeout,
		ShouldSkipTest: shouldSkip,
	})
	suite.Run(t)
}
