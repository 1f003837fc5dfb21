// Package osversionpolicy is the controller of OSVersionPolicy: it moves the selected Kairos
// nodes to one image, one node at a time, each cordoned and drained, its image staged and its
// reboot made by its agent, then proven booted from the agent's report after the boot (a new
// boot ID, the image in /etc/kairos-release, the active slot with no upgrade_failure, the boot
// assessment cleared) and soaked with its storage healthy before the next node starts. The
// steps and their order come from the pure plan in internal/osupgrade and run on the shared
// workflow engine; a failure stops the policy where it is (nothing is undone: an OS image is
// not put back by the policy), holding the cluster-wide claim, with each node's phase and
// evidence in status.nodes.
package osversionpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/nodecordon"
	"github.com/spectrocloud/nodewright/internal/nodehealth"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/vmprotect"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=osversionpolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=osversionpolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=osversionpolicies/finalizers,verbs=update
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,namespace=nodewright-agent,resources=nodeoperations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bootrecoverypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-system,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch;create
// The drain (drain.go) evicts the node's pods through the Eviction API, so that their
// PodDisruptionBudgets hold; RBAC cannot narrow it to the node.
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler runs OSVersionPolicies.
type Reconciler struct {
	engine.Deps
	Client client.Client
	// APIReader reads past the cache: the Nodes before a cordon, the pods to drain, the VMs
	// and their migrations.
	APIReader client.Reader
	// AgentNamespace is where the node agents run their NodeOperations and keep their
	// heartbeat Leases; without it no policy can start (its Preflight fails saying so).
	AgentNamespace string
	// LINSTOR is how to reach the LINSTOR gate (the operator's --linstor-gate-* flags): the
	// Preflight and the soak read the nodes' LINSTOR satellites through it (satellite.go).
	// Without its URL they are not checked, and the Preflight says so.
	LINSTOR linstor.Config

	engine     *engine.Engine[*nwv1.OSVersionPolicy]
	satellites nodehealth.Satellites
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	e, err := engine.Start(mgr, osupgrade.Descriptor, r, &r.Deps, &r.Client, &r.APIReader)
	r.engine = e
	return err
}

// Watches wakes the running policies when an agent reports (a node's boot, its DRBD), when
// one renews its heartbeat Lease, when a Node changes (Ready, a selector's labels), and when
// the BootRecoveryPolicy does (a fallback acknowledged lets the next node's step start).
func (r *Reconciler) Watches(b *builder.Builder, e *engine.Engine[*nwv1.OSVersionPolicy]) *builder.Builder {
	active := handler.EnqueueRequestsFromMapFunc(e.Active)
	b = b.Watches(&nwv1.NodewrightAgentStatus{}, active).Watches(&corev1.Node{}, active).Watches(&nwv1.BootRecoveryPolicy{}, active)
	if r.AgentNamespace != "" {
		b = b.Watches(&coordinationv1.Lease{}, active, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.AgentNamespace
		})))
	}
	return b
}

// Reconcile advances one policy by at most one action (the workflow engine's loop).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// Prepare keeps status.nodes current before anything else: before the policy starts it
// records the nodes it upgrades and their order (which fixes the plan) and the nodes it holds;
// on every reconcile, what each node's agent last reported of its boot. The engine writes it
// with the rest.
func (r *Reconciler) Prepare(ctx context.Context, run *engine.Run[*nwv1.OSVersionPolicy]) (engine.Hold, error) {
	p := run.Object
	agents, err := r.agents(ctx)
	if err != nil {
		return engine.Hold{}, err
	}
	if p.Status.Phase == "" || p.Status.Phase == nwv1.WorkflowPending {
		order, held, _, err := r.selection(ctx, p, agents)
		if err != nil {
			return engine.Hold{}, err
		}
		recorded := map[string]nwv1.NodeOSUpgrade{}
		for _, n := range p.Status.Nodes {
			recorded[n.Name] = n
		}
		nodes := make([]nwv1.NodeOSUpgrade, 0, len(order))
		for i, name := range order {
			n := recorded[name]
			n.Name, n.Position, n.Target = name, int32(i+1), p.Spec.Image
			if n.Phase == "" {
				n.Phase = nwv1.NodeOSPending
			}
			nodes = append(nodes, n)
		}
		p.Status.Nodes, p.Status.Held = nodes, held
	}
	for i := range p.Status.Nodes {
		observe(&p.Status.Nodes[i], agents[p.Status.Nodes[i].Name])
	}
	p.Status.CurrentNode, p.Status.Progress = summary(p)
	return engine.Hold{}, nil
}

// observe copies into n what its agent last reported of its boot.
func observe(n *nwv1.NodeOSUpgrade, a *nwv1.NodewrightAgentStatus) {
	if a == nil || a.Status.OS == nil {
		return
	}
	n.BootID = a.Status.OS.BootID
	if k := a.Status.OS.Kairos; k != nil {
		n.BootedImage, n.BootedVersion, n.BootEntry = k.Image, k.Version, k.BootEntry
	}
}

// selection is the nodes p upgrades, in order, and those it holds: the nodes its selector
// picks, without spec.hold's, those no agent reports (held, saying so) and those that fell
// back from the image before and are not acknowledged (AnnotationAcknowledgeFallback);
// spec.nodeOrder's first, the others in the default order (tiebreakers, secondaries, the
// primary last). More than a policy upgrades gives no order, and how many there were.
func (r *Reconciler) selection(ctx context.Context, p *nwv1.OSVersionPolicy, agents map[string]*nwv1.NodewrightAgentStatus) ([]string, []nwv1.OSNodeHold, int, error) {
	selector := labels.Everything()
	if p.Spec.NodeSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
		if err != nil {
			return nil, nil, 0, nil // admission refuses it
		}
		selector = s
	}
	var list corev1.NodeList
	if err := r.Client.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, nil, 0, err
	}
	if rp := p.Spec.Repairs; rp != nil {
		// A repair changes its node alone.
		list.Items = slices.DeleteFunc(list.Items, func(n corev1.Node) bool { return n.Name != rp.Node })
	}
	held := slices.Clone(p.Spec.Hold)
	isHeld := func(n string) bool {
		return slices.ContainsFunc(held, func(h nwv1.OSNodeHold) bool { return h.Node == n })
	}
	acked := osupgrade.Acknowledged(p)
	pinned, err := osupgrade.Pinned(ctx, r.Client)
	if err != nil {
		return nil, nil, 0, err
	}
	roles := map[string]nwv1.NodeRole{}
	for _, n := range list.Items {
		a := agents[n.Name]
		if isHeld(n.Name) {
			continue
		}
		if a == nil {
			held = append(held, nwv1.OSNodeHold{Node: n.Name, Reason: "no agent reports it (no NodewrightAgentStatus): no agent would upgrade it"})
			continue
		}
		if pin, ok := pinned[n.Name]; ok && !osupgrade.RepairsPin(p, pin) {
			held = append(held, nwv1.OSNodeHold{Node: n.Name, Reason: osupgrade.HoldReason(pin)})
			continue
		}
		// A repair that stages no image does not try the image again: a fallback from it
		// long ago holds nothing.
		if fb := fallbackFrom(a, p.Spec.Image); fb != nil && !slices.Contains(acked, n.Name) && !p.Spec.Repairs.KeepsImage() {
			held = append(held, nwv1.OSNodeHold{Node: n.Name, Reason: fmt.Sprintf(
				"it fell back from this image at boot %s (seen %s): acknowledge it (annotation %s) to try it again",
				fb.BootID, fb.SeenAt.UTC().Format("2006-01-02T15:04:05Z"), nwv1.AnnotationAcknowledgeFallback)})
			continue
		}
		roles[n.Name] = a.Status.Role
	}
	var order []string
	for _, n := range p.Spec.NodeOrder {
		if _, ok := roles[n]; ok {
			order = append(order, n)
			delete(roles, n)
		}
	}
	order = append(order, bondflip.DefaultOrder(roles)...)
	if len(held) > osupgrade.MaxNodes {
		held = held[:osupgrade.MaxNodes]
	}
	if n := len(order); n > osupgrade.MaxNodes {
		return nil, held, n, nil // the Preflight says why
	}
	return order, held, len(order), nil
}

// fallbackFrom is the agent's report of a fallback from image, nil when it reports none.
func fallbackFrom(a *nwv1.NodewrightAgentStatus, image string) *nwv1.KairosFallback {
	if a == nil || a.Status.OS == nil || a.Status.OS.Kairos == nil {
		return nil
	}
	if fb := a.Status.OS.Kairos.LastFallback; fb != nil && fb.FromImage == image {
		return fb
	}
	return nil
}

// staged reports whether node n's Stage part began: its agent may have written the image.
func staged(n nwv1.NodeOSUpgrade) bool {
	for _, p := range n.Parts {
		if p.Name == osupgrade.Stage {
			return true
		}
	}
	return false
}

// summary is what kubectl get shows: the node whose step runs or waits, and how many nodes
// are Done of all.
func summary(p *nwv1.OSVersionPolicy) (current, progress string) {
	done := 0
	for _, n := range p.Status.Nodes {
		if n.Phase == nwv1.NodeOSDone {
			done++
		}
	}
	for _, st := range p.Status.Steps {
		if st.State != nwv1.StepRunning && st.State != nwv1.StepWaiting {
			continue
		}
		if k, ok := osupgrade.ParseStep(osupgrade.Step(st.Name)); ok && k <= len(p.Status.Nodes) {
			current = p.Status.Nodes[k-1].Name
		}
	}
	if len(p.Status.Nodes) > 0 {
		progress = fmt.Sprintf("%d/%d", done, len(p.Status.Nodes))
	}
	return current, progress
}

// Actions are the steps' actions: the Preflight's, a node's step's (its parts), the Recovery's.
func (r *Reconciler) Actions() engine.Actions[*nwv1.OSVersionPolicy] {
	return engine.Scoped(r.newScope, map[workflow.Step]func(context.Context, *scope) (engine.Outcome, error){
		osupgrade.Preflight:  r.preflight,
		osupgrade.ActionNode: r.nodeStep,
		osupgrade.Recovery:   r.recovery,
	})
}

// Finish leaves the nodes as they are while the policy exists: a policy that failed holds the
// cluster for a person to look at. Once it is deleted, it uncordons the nodes it cordoned that
// never staged the image (their drain is all that happened to them) and gives the VMs it
// stopped on them their run strategy back; a node that staged or booted it stays cordoned, and
// its stopped VMs stopped, for a person to look at. VMs it moved off a node run where they went.
func (r *Reconciler) Finish(ctx context.Context, run *engine.Run[*nwv1.OSVersionPolicy]) (engine.Finished, error) {
	p := run.Object
	if p.DeletionTimestamp.IsZero() {
		return engine.Tidied("nothing to tidy: the policy's NodeOperations are its evidence and go with it"), nil
	}
	var uncordoned, left, started, stopped []string
	vms := r.vms(&scope{p: p})
	for _, n := range p.Status.Nodes {
		node := vmprotect.Node{Name: n.Name, Position: int(n.Position)}
		if staged(n) {
			if n.Cordon == nwv1.NodeCordoned {
				left = append(left, fmt.Sprintf("%s (%s)", n.Name, n.Phase))
			}
			names, err := vms.StoppedOn(ctx, node)
			if err != nil {
				return engine.Finished{}, err
			}
			stopped = append(stopped, names...)
			continue
		}
		names, err := vms.Release(ctx, node)
		if err != nil {
			return engine.Finished{}, err
		}
		started = append(started, names...)
		if n.Cordon != nwv1.NodeCordoned {
			continue
		}
		res, err := nodecordon.Uncordon(ctx, r.Client, r.APIReader, n.Name, osupgrade.CordonedBy(p.Name), "policy", n.Cordon)
		if err != nil {
			return engine.Finished{}, err
		}
		if !res.Skipped {
			uncordoned = append(uncordoned, n.Name)
		}
	}
	msg := "the policy's NodeOperations go with it"
	if len(uncordoned) > 0 {
		msg += "; uncordoned " + strings.Join(uncordoned, ", ") + " (drained, never staged)"
	}
	if len(started) > 0 {
		msg += "; gave back their run strategy to the VMs it stopped: " + strings.Join(started, ", ")
	}
	if len(left) > 0 {
		msg += "; left cordoned, for a person to look at: " + strings.Join(left, ", ")
	}
	if len(stopped) > 0 {
		msg += "; left stopped, their run strategy recorded in " + AnnotationStopped + ", for a person to start once the node is looked at: " + strings.Join(stopped, ", ")
	}
	return engine.Tidied("%s", msg), nil
}
