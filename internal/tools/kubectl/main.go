// Command kubectl is kubectl v1.37.2 (k8s.io/kubectl, pinned in this
// module of its own so that its dependencies stay out of the main
// module's): the Kubernetes tests run the install guide's kubectl
// commands with it against the test control plane. Its main is that of
// k8s.io/kubernetes/cmd/kubectl, without the cloud providers' auth
// plugins, which the test cluster does not use.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// The verbosity first, as kubectl's own main does: klog logs while
	// the command is built, before cobra parses the flags.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
