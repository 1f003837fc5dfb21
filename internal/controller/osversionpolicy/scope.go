package osversionpolicy

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// Defaults of the spec (the CRD's) and bounds the spec does not give.
const (
	defaultSoak          = 10 * time.Minute
	defaultRebootTimeout = 15 * time.Minute
	// stageTimeout bounds an OSUpgradeStage: kairos-agent pulls and writes the image.
	stageTimeout = 30 * time.Minute
	// drainTimeout bounds a node's drain.
	drainTimeout = 10 * time.Minute
	// opGrace is how long past an operation's deadline the policy waits for its agent to say
	// how it ended.
	opGrace = 30 * time.Second
)

// scope is one reconcile's view of a policy and its nodes.
type scope struct {
	*engine.Run[*nwv1.OSVersionPolicy]
	p *nwv1.OSVersionPolicy
	// agents are the nodes' NodewrightAgentStatus, by node; leases their heartbeat Leases.
	agents map[string]*nwv1.NodewrightAgentStatus
	leases map[string]*coordinationv1.Lease
	// ops are the policy's NodeOperations, by name.
	ops            map[string]*nwv1.NodeOperation
	agentNamespace string
	// part is the part of a node's step under way, and partStarted when it began.
	part        string
	partStarted time.Time
}

func (r *Reconciler) newScope(ctx context.Context, run *engine.Run[*nwv1.OSVersionPolicy]) (*scope, error) {
	p := run.Object
	s := &scope{Run: run, p: p, ops: map[string]*nwv1.NodeOperation{}, leases: map[string]*coordinationv1.Lease{}, agentNamespace: r.AgentNamespace}
	var err error
	if s.agents, err = r.agents(ctx); err != nil {
		return nil, err
	}
	if r.AgentNamespace == "" {
		return s, nil
	}
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(r.AgentNamespace)); err != nil {
		return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
	}
	for i := range leases.Items {
		s.leases[leases.Items[i].Name] = &leases.Items[i]
	}
	var ops nwv1.NodeOperationList
	if err := r.Client.List(ctx, &ops, client.InNamespace(r.AgentNamespace), client.MatchingLabels{osupgrade.LabelUID: string(p.UID)}); err != nil {
		return nil, err
	}
	for i := range ops.Items {
		s.ops[ops.Items[i].Name] = &ops.Items[i]
	}
	return s, nil
}

// agents reads every node's NodewrightAgentStatus.
func (r *Reconciler) agents(ctx context.Context) (map[string]*nwv1.NodewrightAgentStatus, error) {
	var list nwv1.NodewrightAgentStatusList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	out := make(map[string]*nwv1.NodewrightAgentStatus, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// StepStarted is when the part under way began; for the Preflight and the Recovery, when the
// step did.
func (s *scope) StepStarted() time.Time {
	if s.part != "" {
		return s.partStarted
	}
	return s.Run.StepStarted()
}

// Deadline reports whether the part under way has taken longer than limit, and how long is
// left otherwise.
func (s *scope) Deadline(limit time.Duration) (passed bool, left time.Duration) {
	left = s.StepStarted().Add(limit).Sub(s.Now.Time)
	return left <= 0, left
}

// node is the node at position k (from 1).
func (s *scope) node(k int) string { return s.p.Status.Nodes[k-1].Name }

// describe names node k for a message: "edge-2 (node 1)".
func (s *scope) describe(k int) string { return fmt.Sprintf("%s (node %d)", s.node(k), k) }

// kairos is what node's agent last reported of its Kairos image and boot; nil when none.
func (s *scope) kairos(node string) *nwv1.KairosStatus {
	if a := s.agents[node]; a != nil && a.Status.OS != nil {
		return a.Status.OS.Kairos
	}
	return nil
}

// bootID is node's boot ID in its agent's last report.
func (s *scope) bootID(node string) string {
	if a := s.agents[node]; a != nil && a.Status.OS != nil {
		return a.Status.OS.BootID
	}
	return ""
}

// silent says why node's agent is to be given up ("" while its Lease holds).
func (s *scope) silent(node string) string {
	return management.LeaseHeartbeat(s.agentNamespace, node, s.leases[node]).Silent(s.Now.Time)
}

func soak(p *nwv1.OSVersionPolicy) time.Duration {
	if d := p.Spec.Soak.Duration; d > 0 {
		return d
	}
	return defaultSoak
}

func rebootTimeout(p *nwv1.OSVersionPolicy) time.Duration {
	if d := p.Spec.RebootTimeout.Duration; d > 0 {
		return d
	}
	return defaultRebootTimeout
}

// ensureOp asks node's agent for the operation spec, made by the part label names
// (Node1Stage), under the policy's name and suffix: it creates the NodeOperation unless it
// exists, and returns it as it is now.
func (r *Reconciler) ensureOp(ctx context.Context, s *scope, suffix, node, label string, deadline time.Duration, spec nwv1.NodeOperationSpec) (*nwv1.NodeOperation, error) {
	name := children.Name(s.p.Name, suffix)
	if op, ok := s.ops[name]; ok {
		return op, nil
	}
	spec.NodeName = node
	spec.Deadline = metav1.NewTime(s.Now.Add(deadline))
	op := &nwv1.NodeOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.AgentNamespace, Name: name, Labels: map[string]string{osupgrade.LabelStep: label},
			OwnerReferences: []metav1.OwnerReference{osupgrade.Descriptor.ControllerRef(s.p)}},
		Spec: spec,
	}
	if err := children.Ensure(ctx, r.Client, r.APIReader, osupgrade.Descriptor.Owner(s.p), "NodeOperation", op); err != nil {
		return nil, err
	}
	s.ops[name] = op
	return op, nil
}
