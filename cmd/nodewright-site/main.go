// Command nodewright-site runs the local site (test/site) against a cluster's API server: it
// plays the kubelet, KubeVirt, a CSI driver and the controllers a bare API server lacks, on
// files in one folder.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/spectrocloud/nodewright/test/site"
)

func main() {
	var opts site.Options
	var drivers, namespaces string
	flag.StringVar(&opts.Dir, "dir", "", "folder for the volumes', snapshots' and pods' files (required)")
	flag.StringVar(&drivers, "drivers", "csi.example.com", "comma-separated CSI driver names to serve")
	flag.StringVar(&opts.CopyBinary, "copy-binary", "", "the nodewright-copy executable pods run (required)")
	flag.StringVar(&opts.NodeName, "node-name", site.DefaultNodeName, "the Node to register and run pods on")
	flag.StringVar(&namespaces, "namespaces", "", "comma-separated namespaces to act in; empty for all")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: %s --dir DIR --copy-binary PATH [flags]

Runs the local site against the API server of --kubeconfig (or $KUBECONFIG, or
~/.kube/config) until SIGTERM or SIGINT; see the test/site package for what it plays.

Flags:
`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("site")
	opts.Logger = log
	opts.Drivers = split(drivers)
	opts.Namespaces = split(namespaces)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Cannot reach a cluster: no usable kubeconfig")
		os.Exit(1)
	}
	s, err := site.New(cfg, opts)
	if err != nil {
		log.Error(err, "Cannot build the site")
		os.Exit(1)
	}
	log.Info("Starting the site", "node", s.NodeName(), "dir", s.Dir(), "drivers", opts.Drivers)
	if err := s.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "The site stopped with an error")
		os.Exit(1)
	}
	log.Info("Stopped cleanly")
}

func split(list string) []string {
	var out []string
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
