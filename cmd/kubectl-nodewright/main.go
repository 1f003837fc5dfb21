// Command kubectl-nodewright is the kubectl plugin for Nodewright: "kubectl nodewright status",
// "migrate", "flip", "approve", "events", "audit", "profile", "ui". The commands are in internal/cli;
// see docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/spectrocloud/nodewright/internal/cli"
	"github.com/spectrocloud/nodewright/internal/ui"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

// run is the program minus process setup, so tests can drive it.
func run(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	root := cli.NewRootCommand(streams)
	cli.AddCommand(root, ui.NewCommand)
	return cli.Run(ctx, root, args)
}
