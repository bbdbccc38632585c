// Package kubetest runs a real Kubernetes control plane for the tests:
// kube-apiserver, kube-controller-manager and kube-scheduler of
// Kubernetes v1.37.2 on an embedded etcd (internal/etcdtest), with a CA,
// serving and client certificates and a service-account signing key made
// for the run (internal/pki).
//
// The components are built from the k8s.io/kubernetes module in a module
// of their own (tools/go.mod, its staging modules replaced by their
// v0.37.2 releases, so the main module never builds or vets them) into
// os.UserCacheDir()/ringside/kube-<version>-<hash of tools go.mod and
// go.sum>/. The first test package that needs them builds them under an
// flock (a cold build takes 10 minutes or more on 2 cores, and says so);
// the others wait for it and reuse the cache. envtest's downloads are not
// needed.
//
// A test package starts one control plane, typically in TestMain:
//
//	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: dir, HostIP: net.HostIP()})
//	...
//	defer cp.Stop()
//
// and each test calls kubetest.Require(t, err): without a Go toolchain to
// build the components (or root for the pod network, see podnet) a test
// skips, and fails when CI=true. The components' logs are files in Dir;
// Logs returns their tails for a failing run to print.
//
// There is no kubelet and no container runtime: package node is the node
// agent that registers Nodes and runs the pods scheduled to them as local
// processes, each pod in a network namespace of podnet's.
package kubetest
