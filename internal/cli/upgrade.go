package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const upgradeHelp = `Create a ReplicationUpgrade: turn the single-node LINSTOR storage into replicated storage.
The --peer nodes join the storage node, in the order given, and every volume the storage node
holds gets a replica on each joining data node, in six stages (docs/api.md): Preflight, Place
(the new replicas), Sync (DRBD's initial synchronisation, within --sync-timeout), Verify
(DRBD's online verify), Quorum (quorum and the tiebreaker) and ReleaseTaints (the joining
nodes take workloads). A stage that fails is rolled back with those before it; the storage
node's replicas are never deleted.

NAME is the upgrade's name (default: upgrade- and five random characters); an upgrade named
like a subcommand (list, watch) is named with --name instead.

What is not given is left to the cluster: the API server fills in the replica count (2), the
sync timeout (6h) and the approval (Automatic). The created line says what was filled in. The
API server also checks that the tiebreaker is one of the peers and that the replica count fits
the data nodes; the command checks the same before it sends anything.

The admission webhook refuses an upgrade while another cluster-wide workflow (a flip or a
replication upgrade) has not finished, and unless the cluster is in the Managed mode; the
refusal is printed as the webhook wrote it, naming the field.

With --approval Manual each stage that changes the nodes (Place, Verify, Quorum,
ReleaseTaints) waits until a person approves it (kubectl nodewright approve rupg/NAME);
"upgrade watch" says when, and the command to type. With --wait the command follows the
upgrade to its end, as "upgrade watch --wait" does, and its exit code says how it ended.

Exit codes: 0 created (with --wait: Succeeded); 1 refused or failed (with --wait: ended Failed
or RolledBack, or was deleted); 2 usage; 3 --wait ended before the upgrade did (--timeout, or
interrupted).`

const upgradeExamples = `  # edge-2 joins edge-1's storage: every volume gets a second replica
  kubectl nodewright upgrade --peer edge-2 to-two

  # Two peers, three replicas, each stage that changes the nodes approved by a person
  kubectl nodewright upgrade --peer edge-2 --peer edge-3 --replicas 3 --approval Manual to-three

  # Two data replicas and a diskless tiebreaker for quorum, at night only
  kubectl nodewright upgrade --peer edge-2,edge-3 --tiebreaker edge-3 --maintenance-window "22:00-04:00 Europe/Berlin"

  # In a script: wait for the result, exit 0 only if it Succeeded
  kubectl nodewright upgrade --peer edge-2 --sync-timeout 12h --wait --timeout 14h to-two

  # Follow it later, or list them
  kubectl nodewright upgrade watch to-two
  kubectl nodewright upgrade list`

// The bounds the API puts on an upgrade's spec.
const (
	maxPeers        = 2
	minReplicas     = 2
	maxReplicas     = 3
	defaultReplicas = 2 // the CRD's default
	minSyncTimeout  = time.Minute
	maxSyncTimeout  = 48 * time.Hour
	upgradeKind     = "replicationupgrade"
)

// upgradeOptions are the flags of upgrade.
type upgradeOptions struct {
	tiebreaker, name, output string
	peers                    []string
	replicas                 int32
	syncTimeout              time.Duration
	gates                    gateOptions
	wait                     waitOptions
}

func newUpgradeCommand(f *Factory) *cobra.Command {
	o := &upgradeOptions{}
	cmd := &cobra.Command{
		Use:     "upgrade --peer NODE [--peer NODE] [NAME]",
		Short:   "Replicate the single-node storage onto joining nodes (creates a ReplicationUpgrade); list and watch upgrades",
		Long:    upgradeHelp,
		Example: upgradeExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s wants at most one NAME, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUpgrade(cmd, f, o, args)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.peers, "peer", nil, "A node that joins the storage node (required): repeat it, or separate with commas, for a second (at most 2), in the order they join.")
	fl.Int32Var(&o.replicas, "replicas", 0, "How many replicas with data each volume ends with, the storage node's among them: 2 (the default) or 3; at most the data nodes (the storage node and the --peer nodes but the tiebreaker).")
	fl.StringVar(&o.tiebreaker, "tiebreaker", "", "The --peer node that holds no data but gives DRBD a quorum vote. Default: none.")
	fl.DurationVar(&o.syncTimeout, "sync-timeout", 0, "How long the initial synchronisation may take before the upgrade is rolled back, 1m to 48h. Default: 6h.")
	fl.StringVar(&o.name, "name", "", "Name of the ReplicationUpgrade, for a name that is also a subcommand's (list, watch); otherwise give it as NAME.")
	o.gates.addFlags(cmd, "each stage that changes the nodes waits", "a stage that changes the nodes may start")
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML)
	o.wait.addFlags(cmd, "upgrade")
	_ = cmd.RegisterFlagCompletionFunc("peer", completeNodeOrder(f))
	_ = cmd.RegisterFlagCompletionFunc("tiebreaker", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		given, _ := cmd.Flags().GetStringSlice("peer")
		var peers []string // a completion parses the flags twice: each peer is in given twice
		for _, p := range given {
			if !slices.Contains(peers, p) {
				peers = append(peers, p)
			}
		}
		return completeWords(peers)(cmd, nil, toComplete)
	})

	cmd.AddCommand(newUpgradeListCommand(f), newUpgradeWatchCommand(f))
	return cmd
}

// buildUpgrade turns the arguments and flags into the object to create; mistakes in them are
// usage errors that name the flag.
func buildUpgrade(cmd *cobra.Command, o *upgradeOptions, args []string) (*nwv1.ReplicationUpgrade, error) {
	if len(o.peers) == 0 {
		return nil, usageErrorf("--peer NODE is required: the nodes that join the storage node (one or two)")
	}
	u := &nwv1.ReplicationUpgrade{}
	s := &u.Spec
	var err error
	if s.PeerNodes, err = nodeNames("--peer", o.peers, maxPeers); err != nil {
		return nil, err
	}
	replicas, given := int32(defaultReplicas), cmd.Flags().Changed("replicas")
	if given {
		if o.replicas < minReplicas || o.replicas > maxReplicas {
			return nil, usageErrorf("--replicas %d: must be %d or %d (the replicas with data each volume ends with, the storage node's among them)", o.replicas, minReplicas, maxReplicas)
		}
		replicas, s.ReplicaCount = o.replicas, o.replicas
	}
	if o.tiebreaker != "" {
		if !slices.Contains(s.PeerNodes, o.tiebreaker) {
			return nil, usageErrorf("--tiebreaker %s: not one of --peer (%s): the tiebreaker is a joining node that holds no data", o.tiebreaker, strings.Join(s.PeerNodes, ", "))
		}
		s.TiebreakerNode = o.tiebreaker
	}
	if dataNodes := len(s.PeerNodes) + 1 - min(len(s.TiebreakerNode), 1); int(replicas) > dataNodes {
		which := "the storage node and the --peer nodes"
		if s.TiebreakerNode != "" {
			which = "the storage node and the --peer nodes but the tiebreaker"
		}
		value := fmt.Sprint(replicas)
		if !given {
			value += " (the default)"
		}
		return nil, usageErrorf("--replicas %s: more than the %d data nodes (%s): name another --peer, or fewer replicas", value, dataNodes, which)
	}
	if cmd.Flags().Changed("sync-timeout") {
		d := o.syncTimeout
		if d < minSyncTimeout || d > maxSyncTimeout {
			return nil, usageErrorf("--sync-timeout %s: must be between 1m and 48h", d)
		}
		s.SyncTimeout = metav1.Duration{Duration: d}
	}
	if s.Approval, s.MaintenanceWindow, err = o.gates.build(); err != nil {
		return nil, err
	}
	switch {
	case len(args) == 1 && o.name != "":
		return nil, usageErrorf("--name %s and NAME %s: give the name once", o.name, args[0])
	case len(args) == 1:
		u.Name = args[0]
	case o.name != "":
		u.Name = o.name
	default:
		u.Name = "upgrade-" + utilrand.String(5)
	}
	if errs := validation.IsDNS1123Subdomain(u.Name); len(errs) > 0 {
		return nil, usageErrorf("NAME %q: %s", u.Name, strings.Join(errs, "; "))
	}
	return u, nil
}

func runUpgrade(cmd *cobra.Command, f *Factory, o *upgradeOptions, args []string) error {
	if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML); err != nil {
		return err
	}
	u, err := buildUpgrade(cmd, o, args)
	if err != nil {
		return err
	}
	return createAndFollow(cmd.Context(), f, u, upgradeKind, "upgrade", o.output, o.wait, func() string { return describeUpgrade(u) },
		func(ctx context.Context, c client.WithWatch) error { return upgrades.follow(ctx, f, c, u.Name, o.wait) })
}

// describeUpgrade is one line saying what an upgrade does, with what the API server filled in.
func describeUpgrade(u *nwv1.ReplicationUpgrade) string {
	s := u.Spec
	peers := "peers " + strings.Join(s.PeerNodes, ", ")
	if len(s.PeerNodes) == 1 {
		peers = "peer " + s.PeerNodes[0]
	}
	if s.TiebreakerNode != "" {
		peers += " (" + s.TiebreakerNode + " the tiebreaker, without data)"
	}
	parts := []string{peers}
	if s.ReplicaCount > 0 {
		parts = append(parts, fmt.Sprintf("%d replicas of each volume", s.ReplicaCount))
	}
	if s.SyncTimeout.Duration > 0 {
		parts = append(parts, "sync timeout "+shortDuration(s.SyncTimeout.Duration))
	}
	return strings.Join(append(parts, describeGates(s.Approval, s.MaintenanceWindow)...), ", ")
}
