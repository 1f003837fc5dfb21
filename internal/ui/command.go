package ui

import (
	"github.com/spf13/cobra"

	"github.com/spectrocloud/nodewright/internal/cli"
)

// NewCommand is `kubectl nodewright ui`, added to the plugin's root with cli.AddCommand.
func NewCommand(f *cli.Factory) *cobra.Command {
	var opts Options
	var noBrowser bool
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the Nodewright web UI on 127.0.0.1, with your own credentials",
		Long: `Serves a local web page that shows the cluster (phase, legacy state timeline, nodes),
the replication upgrades (stage by stage, the synchronisation replica by replica, what waits
and why), the bond-mode flips (node by node, what waits and why), the volume migrations
(steps, progress, checksums, live) and an audit trail; it starts or cancels migrations and
approves the step a Manual flip or upgrade waits on. It talks to the API server with your kubeconfig's credentials, so it can do
exactly what you can with kubectl and nothing more; the page's URL carries a secret token and
the server answers only on the loopback address.

With --fleet, pointed at a fleet hub (where nodewright-fleet runs), it shows the hub's member
clusters instead, degraded first, with filters and, for each, the command to act on it with
its own kubeconfig context; that page only reads.

Without -n it shows the migrations of every namespace you may list, and the form starts with
your kubeconfig context's namespace; with -n, that namespace only.

The URL is printed (the token is in its #fragment), and opened in your browser unless
--no-browser, through a temporary file only you can read. Stop it with Ctrl-C.

Exit codes: 0 stopped with Ctrl-C or SIGTERM; 1 it could not start (the address is taken, the
kubeconfig is unusable); 2 usage error.`,
		Example: `  # Serve the UI for every namespace you may list (the form starts with the context's), and open it
  kubectl nodewright ui

  # Only namespace demo, on a fixed port, with the local site's audit trail verified
  kubectl nodewright ui -n demo --addr 127.0.0.1:8765 --no-browser \
    --trail-dir .demo/audit --trail-key .demo/audit-key.pub

  # A fleet hub's member clusters
  kubectl nodewright ui --context hub --fleet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.RESTConfig()
			if err != nil {
				return err
			}
			ns, explicit, err := f.Namespace()
			if err != nil {
				return err
			}
			// Without -n, every namespace the user may list is shown, and the form starts
			// with the context's namespace, the one kubectl would use.
			if explicit {
				opts.Namespace = ns
			} else {
				opts.DefaultNamespace = ns
			}
			opts.Out, opts.Log, opts.OpenBrowser = f.Streams().Out, f.Streams().ErrOut, !noBrowser
			return Run(cmd.Context(), cfg, opts)
		},
	}
	cmd.Flags().StringVar(&opts.Addr, "addr", DefaultAddr, "Loopback address and port to serve on; port 0 takes a free one.")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "Print the URL without opening a browser.")
	cmd.Flags().BoolVar(&opts.Fleet, "fleet", false, "The kubeconfig context is a fleet hub's: show its member clusters (read-only), with the command to act on each.")
	cmd.Flags().StringVar(&opts.TrailDir, "trail-dir", "", "A local folder holding an audit trail (such as the local site's .demo/audit) to show.")
	cmd.Flags().StringSliceVar(&opts.TrailKeys, "trail-key", nil, "Public key file(s) to verify the trail's checkpoints with (repeatable).")
	return cmd
}
