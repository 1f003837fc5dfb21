package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/management"
)

const statusHelp = `Show the cluster as Nodewright observes it: the NodewrightCluster "nodewright" and one
NodewrightAgentStatus per node.

  - the phase, and why: the conditions, the False ones first, with their messages;
  - the management mode in effect (Observe: the legacy DaemonSet decides; Managed: the
    agents report and Nodewright's workflows may change nodes), and the one requested when
    it differs (a handover refused, say: the ManagementApplied condition says why);
  - the legacy DaemonSet's state and since when (in Observe);
  - each node: role, heartbeat age, stale or not, DRBD resources connected and up to date,
    data out of sync, bond mode;
  - the EdgeProfile in force (name, version, digest) and its ProfileApplied condition;
  - the recent warnings, newest last.

A node's heartbeat age is read from the legacy ConfigMap, where the DaemonSet refreshes it
every few seconds; in Managed, from its agent's heartbeat Lease in --agent-namespace, renewed
every 10 s. When there is none for the node, or it cannot be read (no RBAC on it, say), the
age is that of status.heartbeat.lastSeen, which Nodewright records only when the node's
freshness changes, and is marked with a *. STALE is Nodewright's verdict.

Exit codes: 0 shown (whatever the phase), 1 the NodewrightCluster cannot be read, 2 usage.`

const statusExamples = `  # The whole picture
  kubectl nodewright status

  # For a script: the phase alone
  kubectl nodewright status -o json | jq -r .phase

  # Without colour, even on a terminal
  kubectl nodewright status --no-color`

// DefaultAgentNamespace is the agents' namespace the chart installs them in.
const DefaultAgentNamespace = "nodewright-agent"

func newStatusCommand(f *Factory) *cobra.Command {
	var output, agentNamespace string
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the cluster's phase and why, its management mode, nodes, profile and recent warnings",
		Long:    statusHelp,
		Example: statusExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			report, err := readStatus(cmd.Context(), c, agentNamespace, f.Now())
			if err != nil {
				return err
			}
			out := f.Streams().Out
			if output != outputTable {
				return printData(out, output, report)
			}
			return renderStatus(out, report, f.Now(), palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	cmd.Flags().StringVar(&agentNamespace, "agent-namespace", DefaultAgentNamespace,
		"Namespace of the node agents' heartbeat Leases, read for the heartbeats' ages in the Managed mode.")
	return cmd
}

// statusReport is what status shows, and what -o json prints.
type statusReport struct {
	Name             string             `json:"name"`
	Phase            nwv1.ClusterPhase  `json:"phase"`
	LegacyState      nwv1.LegacyState   `json:"legacyState,omitempty"`
	LegacyStateSince *metav1.Time       `json:"legacyStateSince,omitempty"`
	LegacyGeneration int64              `json:"legacyGeneration,omitempty"`
	Nodes            nwv1.NodeCounts    `json:"nodes"`
	Management       managementReport   `json:"management"`
	Conditions       []metav1.Condition `json:"conditions"`
	Agents           []agentReport      `json:"agents"`
	Profile          *profileReport     `json:"profile,omitempty"`
	// RecentWarnings are newest last.
	RecentWarnings []nwv1.ClusterWarning `json:"recentWarnings"`
}

// managementReport is who decides about the nodes.
type managementReport struct {
	// Requested is spec.management (Observe when unset).
	Requested nwv1.ManagementMode `json:"requested"`
	// InEffect is status.management; empty until the cluster was observed.
	InEffect nwv1.ManagementMode `json:"inEffect,omitempty"`
	// Handover is the ManagementApplied condition.
	Handover *metav1.Condition `json:"handover,omitempty"`
}

// agentReport is one node.
type agentReport struct {
	Name       string             `json:"name"`
	Role       nwv1.NodeRole      `json:"role,omitempty"`
	Heartbeat  heartbeatReport    `json:"heartbeat"`
	Storage    *nwv1.DRBDStatus   `json:"storage,omitempty"`
	BondMode   nwv1.BondMode      `json:"bondMode,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Where a heartbeat time comes from.
const (
	heartbeatFromConfigMap = "legacyConfigMap"
	heartbeatFromLease     = "agentLease"
	heartbeatFromLastSeen  = "lastSeen"
)

type heartbeatReport struct {
	// Time is the newest heartbeat known: the legacy ConfigMap's (in Managed, the agent's
	// Lease's), else status.heartbeat.lastSeen.
	Time *metav1.Time `json:"time,omitempty"`
	// Source says which of the two Time is.
	Source string `json:"source,omitempty"`
	// AgeSeconds is how old Time was when status ran.
	AgeSeconds *int64 `json:"ageSeconds,omitempty"`
	// Stale is Nodewright's verdict (status.heartbeat.stale).
	Stale bool `json:"stale"`
}

type profileReport struct {
	// Requested is spec.profileRef.name.
	Requested string `json:"requested,omitempty"`
	// Active is status.profile: the profile in force.
	Active *nwv1.ActiveProfile `json:"active,omitempty"`
	// Applied is the ProfileApplied condition.
	Applied *metav1.Condition `json:"applied,omitempty"`
}

// readStatus reads the NodewrightCluster, the agent statuses and, for the live heartbeats,
// the legacy ConfigMap the cluster observes, or in Managed the agents' Leases in agentNS.
func readStatus(ctx context.Context, c client.Reader, agentNS string, now time.Time) (*statusReport, error) {
	nwc := &nwv1.NodewrightCluster{}
	if err := c.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("NodewrightCluster %q not found: Nodewright observes nothing until it is created (see docs/api.md)", nwv1.NodewrightClusterName)
		}
		return nil, apiError(err, "nodewrightcluster", nwv1.NodewrightClusterName)
	}
	var agents nwv1.NodewrightAgentStatusList
	if err := c.List(ctx, &agents); err != nil {
		return nil, apiError(err, "nodewrightagentstatuses", "")
	}
	if bridge.ReadsAgents(nwc) {
		return buildStatus(nwc, agents.Items, leaseHeartbeats(ctx, c, agentNS), heartbeatFromLease, now), nil
	}
	live := liveHeartbeats(ctx, c, bridge.Effective(ctx, c, nwc))
	return buildStatus(nwc, agents.Items, live, heartbeatFromConfigMap, now), nil
}

// leaseHeartbeats reads each agent's last renewal from its heartbeat Lease in namespace;
// empty when they cannot be read, which status then says.
func leaseHeartbeats(ctx context.Context, c client.Reader, namespace string) map[string]time.Time {
	var leases coordinationv1.LeaseList
	if namespace == "" || c.List(ctx, &leases, client.InNamespace(namespace)) != nil {
		return nil
	}
	out := map[string]time.Time{}
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil {
			out[l.Name] = l.Spec.RenewTime.Time
		}
	}
	return out
}

// liveHeartbeats reads each node's heartbeat from the legacy ConfigMap; empty when it cannot
// be read, which status then says.
func liveHeartbeats(ctx context.Context, c client.Reader, effective *nwv1.NodewrightCluster) map[string]time.Time {
	cm := &corev1.ConfigMap{}
	ref := effective.Spec.Legacy.ConfigMapRef
	if ref.Name == "" || c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cm) != nil {
		return nil
	}
	obs, _ := legacy.Parse(cm.Data)
	out := map[string]time.Time{}
	for _, n := range obs.Nodes {
		if !n.Heartbeat.IsZero() {
			out[n.Name] = n.Heartbeat
		}
	}
	return out
}

// buildStatus assembles the report: conditions False first, then Unknown, then True, each
// group in the order the status lists them; nodes by name. live are the heartbeats read from
// source.
func buildStatus(nwc *nwv1.NodewrightCluster, agents []nwv1.NodewrightAgentStatus, live map[string]time.Time, source string, now time.Time) *statusReport {
	st := nwc.Status
	r := &statusReport{
		Name: nwc.Name, Phase: st.Phase, LegacyState: st.LegacyState, LegacyStateSince: st.LegacyStateSince,
		LegacyGeneration: st.LegacyGeneration, Nodes: st.Nodes, Conditions: conditionsFalseFirst(st.Conditions),
		RecentWarnings: st.RecentWarnings, Agents: []agentReport{},
		Management: managementReport{Requested: management.Requested(nwc), InEffect: st.Management,
			Handover: meta.FindStatusCondition(st.Conditions, nwv1.ConditionManagementApplied)},
	}
	if r.Conditions == nil {
		r.Conditions = []metav1.Condition{}
	}
	if r.RecentWarnings == nil {
		r.RecentWarnings = []nwv1.ClusterWarning{}
	}
	if nwc.Spec.ProfileRef != nil || st.Profile != nil {
		p := &profileReport{Active: st.Profile, Applied: meta.FindStatusCondition(st.Conditions, nwv1.ConditionProfileApplied)}
		if nwc.Spec.ProfileRef != nil {
			p.Requested = nwc.Spec.ProfileRef.Name
		}
		r.Profile = p
	}
	for _, a := range agents {
		ar := agentReport{Name: a.Name, Role: a.Status.Role, Storage: a.Status.Storage, BondMode: a.Status.Network.BondMode,
			Conditions: a.Status.Conditions, Heartbeat: heartbeatReport{Stale: a.Status.Heartbeat.Stale}}
		if t, ok := live[a.Name]; ok {
			ar.Heartbeat.Time, ar.Heartbeat.Source = &metav1.Time{Time: t}, source
		} else if a.Status.Heartbeat.LastSeen != nil {
			ar.Heartbeat.Time, ar.Heartbeat.Source = a.Status.Heartbeat.LastSeen.DeepCopy(), heartbeatFromLastSeen
		}
		if ar.Heartbeat.Time != nil {
			secs := int64(max(now.Sub(ar.Heartbeat.Time.Time), 0) / time.Second)
			ar.Heartbeat.AgeSeconds = &secs
		}
		r.Agents = append(r.Agents, ar)
	}
	slices.SortFunc(r.Agents, func(a, b agentReport) int { return strings.Compare(a.Name, b.Name) })
	return r
}

func conditionsFalseFirst(conds []metav1.Condition) []metav1.Condition {
	rank := map[metav1.ConditionStatus]int{metav1.ConditionFalse: 0, metav1.ConditionUnknown: 1, metav1.ConditionTrue: 2}
	out := slices.Clone(conds)
	slices.SortStableFunc(out, func(a, b metav1.Condition) int { return rank[a.Status] - rank[b.Status] })
	return out
}
