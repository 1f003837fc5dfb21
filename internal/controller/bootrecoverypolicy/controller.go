// Package bootrecoverypolicy is the controller of the BootRecoveryPolicy singleton: it reads
// every Kairos node's boot from its agent's report (the slot, the boot ID, GRUB's
// boot-assessment flags, the upgrade_failure sentinel, the last fallback) into status.nodes,
// and acts on what it sees, as the spec says:
//
//   - a fallback from a staged image is named (a Warning Event, the FellBack condition, the
//     metric nodewright_node_boot_fallback, an audit record "fell back from X to Y at boot
//     B") and, with onFallback.holdUpgrades, pins the node to the image it booted: every
//     OSVersionPolicy holds it, and none starts another node's step, until a person
//     acknowledges it (AnnotationAcknowledgeFallback, "node@bootID");
//   - a boot into the recovery system is cordoned (the Node carries the cordon annotation
//     naming the policy, so that only the policy's own cordon is lifted once the node boots
//     another entry) and alerted;
//   - each boot's post-boot health (the Node Ready, the agent reporting, every DRBD resource
//     of the node Connected and UpToDate with quorum, the LINSTOR satellite ONLINE, the
//     systemd units of spec.postBootHealth.systemdUnits active as the agent reports them) must be
//     green within spec.postBootHealth.timeout of the boot first seen: one that is not is
//     alerted and, with onPostBootHealthTimeout RollbackWithApproval, rolled back to the image
//     of the node's last healthy boot once a person approves it (rollback.go).
//
// Reading never needs approval and changes no host: the repairs are workflows.
package bootrecoverypolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/nodecordon"
	"github.com/spectrocloud/nodewright/internal/nodehealth"
	"github.com/spectrocloud/nodewright/internal/text"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bootrecoverypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bootrecoverypolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-system,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Audit actions of the policy's records.
const (
	ActionFellBack              = "NodeBootFellBack"
	ActionRecoveryBoot          = "NodeRecoveryBoot"
	ActionPostBootHealthTimeout = "NodePostBootHealthTimedOut"
	ActionFallbackAcknowledged  = "NodeFallbackAcknowledged"
)

// The reasons of the policy's Events and conditions.
const (
	ReasonFellBack              = "NodeFellBack"
	ReasonFallbackAcknowledged  = "FallbackAcknowledged"
	ReasonRecoveryBoot          = "RecoveryBoot"
	ReasonPostBootHealthTimeout = "PostBootHealthTimedOut"
	ReasonPostBootHealthy       = "PostBootHealthy"
	ReasonWaiting               = "WaitingForPostBootHealth"
	ReasonNone                  = "None"
	ReasonCordonFailed          = "CordonFailed"
)

// retryCordon is how soon a cordon or uncordon that failed is tried again.
const retryCordon = 10 * time.Second

// CordonedBy is the cordon annotation's value on a Node the policy cordoned.
const CordonedBy = "bootrecoverypolicy/" + nwv1.BootRecoveryPolicyName

// defaultTimeout is spec.postBootHealth.timeout's default (the CRD's).
const defaultTimeout = 15 * time.Minute

// Key is the singleton's key.
var Key = types.NamespacedName{Name: nwv1.BootRecoveryPolicyName}

// Reconciler runs the BootRecoveryPolicy.
type Reconciler struct {
	Client client.Client
	// APIReader reads a Node past the cache before a cordon.
	APIReader client.Reader
	Recorder  record.EventRecorder
	// Audit, when set, receives the records of the fallbacks, recovery boots and timed-out
	// post-boot health seen, and of the acknowledgements; Actor is who they say saw them.
	Audit audit.Appender
	Actor string
	// AgentNamespace is where the node agents keep their heartbeat Leases.
	AgentNamespace string
	// LINSTOR is the operator's LINSTOR gate: the post-boot health reads the node's satellite
	// through it; without its URL the satellite is not checked.
	LINSTOR linstor.Config
	Clock   clock.PassiveClock

	satellites nodehealth.Satellites
}

// SetupWithManager registers the controller: the singleton is reconciled when it changes,
// when an agent reports, when a heartbeat Lease is renewed and when a Node changes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	registerMetrics()
	singleton := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: Key}}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("bootrecoverypolicy").
		For(&nwv1.BootRecoveryPolicy{}).
		Watches(&nwv1.NodewrightAgentStatus{}, singleton).
		Watches(&corev1.Node{}, singleton).
		// A repair's progress (repair.go).
		Watches(&nwv1.OSVersionPolicy{}, singleton)
	if r.AgentNamespace != "" {
		b = b.Watches(&coordinationv1.Lease{}, singleton, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.AgentNamespace
		})))
	}
	return b.Complete(r)
}

// Reconcile reads the boots into the status and acts on them.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != nwv1.BootRecoveryPolicyName {
		return ctrl.Result{}, nil
	}
	p := &nwv1.BootRecoveryPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); apierrors.IsNotFound(err) {
		forgetMetrics()
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	w, err := r.read(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := p.DeepCopy()
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	var records []audit.Record
	recheck := time.Duration(0)
	soon := func(d time.Duration) {
		if d > 0 && (recheck == 0 || d < recheck) {
			recheck = d
		}
	}
	previous := map[string]nwv1.NodeBootRecord{}
	for _, n := range p.Status.Nodes {
		previous[n.Name] = n
	}
	acks := Acknowledgements(p)
	var nodes []nwv1.NodeBootRecord
	for _, name := range w.kairosNodes() {
		prev, seen := previous[name]
		n := r.observe(p, prev, w.agents[name], now)
		if !seen || prev.BootID != n.BootID {
			records = append(records, r.newBoot(ctx, p, &n, now)...)
		}
		records = append(records, r.fallback(p, prev, &n, acks, now)...)
		n.Repair = prev.Repair
		rec, err := r.repair(ctx, p, &n, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		records = append(records, rec...)
		if err := r.recovery(ctx, p, &n); err != nil {
			// One node's Node write refused is no reason to stop seeing the others' boots.
			ctrl.LoggerFrom(ctx).Error(err, "The recovery cordon failed", "node", n.Name)
			r.event(p, corev1.EventTypeWarning, ReasonCordonFailed, fmt.Sprintf("%s: %v", n.Name, err))
			soon(retryCordon)
		}
		health, wait := r.postBootHealth(ctx, p, w, &n, now)
		records = append(records, health...)
		soon(wait)
		n.Rollback = prev.Rollback
		rec, err = r.rollback(ctx, p, &n, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		records = append(records, rec...)
		nodes = append(nodes, n)
	}
	// A node whose agent no longer reports a Kairos boot keeps its record while the policy
	// holds its cordon (nothing else would lift it), its fallback is not acknowledged (a
	// silent node is no reason to let the upgrades go on) or its rollback is under way (its end
	// is still to be recorded).
	for _, prev := range p.Status.Nodes {
		if !slices.ContainsFunc(nodes, func(n nwv1.NodeBootRecord) bool { return n.Name == prev.Name }) &&
			(prev.Cordon == nwv1.NodeCordoned || prev.Unacknowledged() != nil || rollbackUnderWay(prev)) {
			nodes = append(nodes, prev)
		}
	}
	slices.SortFunc(nodes, func(a, b nwv1.NodeBootRecord) int { return strings.Compare(a.Name, b.Name) })
	if len(nodes) > nwv1.MaxBootRecoveryNodes {
		nodes = nodes[:nwv1.MaxBootRecoveryNodes]
	}
	p.Status.Nodes = nodes
	p.Status.ObservedGeneration = p.Generation
	summarise(p, now)
	if err := r.appendRecords(ctx, records); err != nil {
		// The status is not written either: the next reconcile sees the same boots as new and
		// builds the same records again (a record's ID is stable; the trail keeps one of each).
		return ctrl.Result{}, err
	}
	setMetrics(p)
	if !equalStatus(before, p) {
		if err := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the BootRecoveryPolicy's status: %w", err)
		}
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// world is what one reconcile reads: the agents' reports and heartbeat Leases, by node.
type world struct {
	agents         map[string]*nwv1.NodewrightAgentStatus
	leases         map[string]*coordinationv1.Lease
	agentNamespace string
}

func (r *Reconciler) read(ctx context.Context) (*world, error) {
	w := &world{agents: map[string]*nwv1.NodewrightAgentStatus{}, leases: map[string]*coordinationv1.Lease{}, agentNamespace: r.AgentNamespace}
	var agents nwv1.NodewrightAgentStatusList
	if err := r.Client.List(ctx, &agents); err != nil {
		return nil, fmt.Errorf("listing the agents' reports: %w", err)
	}
	for i := range agents.Items {
		w.agents[agents.Items[i].Name] = &agents.Items[i]
	}
	if r.AgentNamespace != "" {
		var leases coordinationv1.LeaseList
		if err := r.Client.List(ctx, &leases, client.InNamespace(r.AgentNamespace)); err != nil {
			return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
		}
		for i := range leases.Items {
			w.leases[leases.Items[i].Name] = &leases.Items[i]
		}
	}
	return w, nil
}

// kairosNodes are the nodes whose agents report a Kairos boot, by name.
func (w *world) kairosNodes() []string {
	var out []string
	for name, a := range w.agents {
		if a.Status.OS != nil && a.Status.OS.Kairos != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// observe is node's record from its agent's report, what the policy recorded of the same
// boot kept.
func (r *Reconciler) observe(p *nwv1.BootRecoveryPolicy, prev nwv1.NodeBootRecord, a *nwv1.NodewrightAgentStatus, now metav1.Time) nwv1.NodeBootRecord {
	k := a.Status.OS.Kairos
	n := nwv1.NodeBootRecord{
		Name: a.Name, BootEntry: k.BootEntry, BootID: a.Status.OS.BootID, Image: k.Image, UpgradeFailure: k.UpgradeFailure,
		LastFallback: k.LastFallback.DeepCopy(), Acknowledged: prev.Acknowledged, Cordon: prev.Cordon, DRBDResources: prev.DRBDResources,
		LastHealthy: prev.LastHealthy,
	}
	n.BootAssessment, n.BootCounting = k.BootAssessment.DeepCopy(), k.BootCounting.DeepCopy()
	n.NextBootFallsBack = WouldFallBack(k)
	if prev.BootID == n.BootID && prev.BootSeenAt != nil {
		n.BootSeenAt, n.PostBootHealth = prev.BootSeenAt, prev.PostBootHealth
	} else {
		n.BootSeenAt = ptr.To(now)
		n.PostBootHealth = &nwv1.PostBootHealthStatus{BootID: n.BootID, Deadline: metav1.NewTime(now.Add(timeout(p)))}
	}
	return n
}

// WouldFallBack says why a node whose agent reports k would fall back at its next boot, as
// Kairos's GRUB configuration decides it (the agent refuses a Reboot for the same reason,
// internal/agent): boot_assessment_tentative=yes (the last assessed boot never counted as good)
// with enable_boot_assessment or enable_boot_assessment_always yes (kairos#4303). Empty when
// it would not, or when the agent reports no boot-assessment block.
func WouldFallBack(k *nwv1.KairosStatus) string {
	if k == nil || !k.BootAssessment.WouldFallBack() {
		return ""
	}
	a := k.BootAssessment
	return fmt.Sprintf("its boot assessment has boot_assessment_tentative=yes with enable_boot_assessment=%t and enable_boot_assessment_always=%t: its next boot would fall back to the passive slot at once (kairos#4303)", a.Enabled, a.Always)
}

// timeout is spec.postBootHealth.timeout, or its default.
func timeout(p *nwv1.BootRecoveryPolicy) time.Duration {
	if d := p.Spec.PostBootHealth.Timeout.Duration; d > 0 {
		return d
	}
	return defaultTimeout
}

func alertOnFallback(p *nwv1.BootRecoveryPolicy) bool {
	return p.Spec.OnFallback.Alert == nil || *p.Spec.OnFallback.Alert
}

func cordonRecovery(p *nwv1.BootRecoveryPolicy) bool {
	return p.Spec.OnRecoveryBoot.Cordon == nil || *p.Spec.OnRecoveryBoot.Cordon
}

func alertOnRecovery(p *nwv1.BootRecoveryPolicy) bool {
	return p.Spec.OnRecoveryBoot.Alert == nil || *p.Spec.OnRecoveryBoot.Alert
}

// newBoot acts on a boot the policy sees for the first time: a boot into the recovery system
// is recorded and alerted.
func (r *Reconciler) newBoot(_ context.Context, p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord, now metav1.Time) []audit.Record {
	if n.BootEntry != nwv1.KairosBootRecovery {
		return nil
	}
	msg := fmt.Sprintf("%s booted its recovery system (boot %s)", n.Name, n.BootID)
	if alertOnRecovery(p) {
		r.event(p, corev1.EventTypeWarning, ReasonRecoveryBoot, msg)
	}
	return []audit.Record{r.record(p, ActionRecoveryBoot, "", string(nwv1.KairosBootRecovery), ReasonRecoveryBoot, msg, n.Name+"/"+n.BootID, now, n.Name)}
}

// fallback acts on node n's last fallback: a new one (a boot ID the policy had not recorded)
// is named, recorded and alerted; an acknowledgement of it (acks names the node and the boot)
// is recorded; while it is not acknowledged, holdUpgrades pins the node to the image it
// booted.
func (r *Reconciler) fallback(p *nwv1.BootRecoveryPolicy, prev nwv1.NodeBootRecord, n *nwv1.NodeBootRecord, acks map[string]string, now metav1.Time) []audit.Record {
	if n.LastFallback == nil && prev.LastFallback != nil {
		// The agent reports none (its record unreadable, say): a fallback ends only with its
		// acknowledgement or a later fallback, never with a report that lost it.
		n.LastFallback, n.PinnedImage = prev.LastFallback, prev.PinnedImage
	}
	fb := n.LastFallback
	if fb == nil {
		n.Acknowledged, n.PinnedImage = nil, ""
		return nil
	}
	var records []audit.Record
	if prev.LastFallback == nil || prev.LastFallback.BootID != fb.BootID {
		msg := FallbackMessage(n.Name, fb)
		if alertOnFallback(p) {
			r.event(p, corev1.EventTypeWarning, ReasonFellBack, msg)
		}
		records = append(records, r.record(p, ActionFellBack, fb.FromImage, fb.ToImage, ReasonFellBack, msg, n.Name+"/"+fb.BootID, fb.SeenAt, n.Name))
	}
	if n.Acknowledged != nil && n.Acknowledged.BootID != fb.BootID {
		n.Acknowledged = nil
	}
	if n.Acknowledged == nil && acks[n.Name] == fb.BootID {
		by := text.Shorten(p.Annotations[nwv1.AnnotationAcknowledgedBy], 512)
		n.Acknowledged = &nwv1.FallbackAcknowledgement{BootID: fb.BootID, By: by, At: now}
		msg := fmt.Sprintf("%s's fallback from %s at boot %s acknowledged by %s", n.Name, fb.FromImage, fb.BootID, orUnknown(by))
		r.event(p, corev1.EventTypeNormal, ReasonFallbackAcknowledged, msg)
		records = append(records, r.record(p, ActionFallbackAcknowledged, "Unacknowledged", "Acknowledged", ReasonFallbackAcknowledged, msg, n.Name+"/"+fb.BootID, now, n.Name, audit.Detail{Name: "acknowledgedBy", Value: by}))
	}
	n.PinnedImage = ""
	if n.Unacknowledged() != nil && p.HoldsUpgrades() {
		n.PinnedImage = n.Image
		if n.PinnedImage == "" {
			n.PinnedImage = "(the image it booted: its kairos-release names none)"
		}
	}
	return records
}

// FallbackMessage says what a fallback was: "edge-2 fell back from X to Y at boot B".
func FallbackMessage(node string, fb *nwv1.KairosFallback) string {
	to := fb.ToImage
	if to == "" {
		to = "the passive image"
	}
	return fmt.Sprintf("%s fell back from %s to %s at boot %s (seen %s)", node, fb.FromImage, to, fb.BootID, fb.SeenAt.UTC().Format(time.RFC3339))
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown user"
	}
	return s
}

// recovery cordons a node that runs its recovery system (onRecoveryBoot.cordon) and lifts
// the policy's own cordon once it boots another entry. The Node is the record
// (nodecordon): a node a person cordoned is never uncordoned.
func (r *Reconciler) recovery(ctx context.Context, p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord) error {
	switch {
	case n.BootEntry == nwv1.KairosBootRecovery && cordonRecovery(p):
		if n.Cordon == nwv1.NodeCordoned {
			return nil
		}
		// Cordon again while WasCordoned: the other holder may have uncordoned it since.
		res, err := nodecordon.Cordon(ctx, r.Client, r.APIReader, n.Name, CordonedBy, "boot-recovery policy")
		if err != nil {
			return err
		}
		was := n.Cordon
		if !res.Skipped {
			n.Cordon = res.Cordon
		}
		if res.Reason != "" && n.Cordon != was {
			r.event(p, corev1.EventTypeNormal, res.Reason, res.Message+": it runs its recovery system")
		}
	case n.BootEntry != nwv1.KairosBootRecovery:
		if n.Cordon == nwv1.NodeWasCordoned {
			n.Cordon = ""
		}
		// The Node says whether the policy's cordon is on it, not the status: a cordon whose
		// status write was lost, or made before the policy was deleted and created again, is
		// lifted too. Uncordon lifts only a cordon that carries the policy's mark.
		if n.Cordon != nwv1.NodeCordoned && !r.markedByPolicy(ctx, n.Name) {
			return nil
		}
		res, err := nodecordon.Uncordon(ctx, r.Client, r.APIReader, n.Name, CordonedBy, "boot-recovery policy", nwv1.NodeCordoned)
		if err != nil {
			return err
		}
		n.Cordon = res.Cordon
		if res.Reason != "" {
			r.event(p, corev1.EventTypeNormal, res.Reason, fmt.Sprintf("%s: it booted %s (boot %s)", res.Message, orEntry(n.BootEntry), n.BootID))
		}
	}
	return nil
}

// markedByPolicy reports whether the cached Node carries the policy's cordon mark.
func (r *Reconciler) markedByPolicy(ctx context.Context, name string) bool {
	var node corev1.Node
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return false
	}
	return node.Spec.Unschedulable && node.Annotations[nodecordon.AnnotationCordonedBy] == CordonedBy
}

func orEntry(e nwv1.KairosBootEntry) string {
	if e == "" {
		return "an entry it does not name"
	}
	return string(e)
}

// postBootHealth checks node n's current boot until its health is green once or its deadline
// passes: then it records the pass, or the timeout (an Event, an audit record). It returns
// the records and how soon to look again while it waits.
func (r *Reconciler) postBootHealth(ctx context.Context, p *nwv1.BootRecoveryPolicy, w *world, n *nwv1.NodeBootRecord, now metav1.Time) ([]audit.Record, time.Duration) {
	h := n.PostBootHealth
	if h != nil && h.PassedAt != nil && h.BootID == n.BootID && (n.LastHealthy == nil || n.LastHealthy.BootID != n.BootID) {
		setLastHealthy(n, *h.PassedAt)
	}
	if h != nil && h.PassedAt != nil {
		// The baseline follows the node while its DRBD is green: a volume deleted or moved off it
		// is not missed at its next boot.
		if d := w.agents[n.Name].Status.Storage; d != nil && nodehealth.DRBDRed(w.agents[n.Name], n.Name, 0) == "" {
			n.DRBDResources = d.Resources
		}
	}
	if h == nil || h.PassedAt != nil || h.TimedOutAt != nil {
		return nil, 0
	}
	red, satellite := r.red(ctx, p, w, n)
	if red == "" {
		h.PassedAt, h.Failing = ptr.To(now), ""
		setLastHealthy(n, now)
		if d := w.agents[n.Name].Status.Storage; d != nil {
			n.DRBDResources = d.Resources
		}
		return nil, 0
	}
	h.Failing = text.Shorten(red, 1024)
	if now.Before(&h.Deadline) {
		wait := h.Deadline.Sub(now.Time) + time.Second
		if satellite {
			wait = min(wait, nodehealth.SatellitePoll)
		}
		return nil, wait
	}
	h.TimedOutAt = ptr.To(now)
	msg := fmt.Sprintf("%s's health was not green within %s of boot %s (first seen %s): %s", n.Name, timeout(p), n.BootID,
		n.BootSeenAt.UTC().Format(time.RFC3339), red)
	r.event(p, corev1.EventTypeWarning, ReasonPostBootHealthTimeout, msg)
	return []audit.Record{r.record(p, ActionPostBootHealthTimeout, "Booted", "PostBootHealthTimedOut", ReasonPostBootHealthTimeout, text.Shorten(msg, 2048), n.Name+"/"+n.BootID, now, n.Name)}, 0
}

// red says which of node n's post-boot checks is red, and whether its LINSTOR satellite is
// among them.
func (r *Reconciler) red(ctx context.Context, p *nwv1.BootRecoveryPolicy, w *world, n *nwv1.NodeBootRecord) (string, bool) {
	var red []string
	var node corev1.Node
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); {
	case apierrors.IsNotFound(err):
		red = append(red, "there is no Node "+n.Name)
	case err != nil:
		red = append(red, fmt.Sprintf("Node %s could not be read: %v", n.Name, err))
	case !nodehealth.Ready(&node):
		red = append(red, fmt.Sprintf("Node %s is not Ready", n.Name))
	}
	a := w.agents[n.Name]
	if silent := management.LeaseHeartbeat(w.agentNamespace, n.Name, w.leases[n.Name]).Silent(r.Clock.Now()); w.agentNamespace != "" && silent != "" {
		red = append(red, silent)
	} else if a.Status.Heartbeat.Stale {
		red = append(red, n.Name+"'s report is stale")
	}
	if msg := nodehealth.DRBDRed(a, n.Name, n.DRBDResources); msg != "" {
		red = append(red, msg)
	}
	red = append(red, unitsRed(p.Spec.PostBootHealth.SystemdUnits, a.Status.OS)...)
	satellite, _ := r.satellites.Red(ctx, r.LINSTOR, n.Name)
	if satellite != "" {
		red = append(red, satellite)
	}
	return strings.Join(red, "; "), satellite != ""
}

// unitsRed says which of the named systemd units the agent's report (reported) does not show
// active: "unit X is failed/failed", "unit X is inactive/dead (not-found)", or "unit X is not
// reported by the agent" (it could not read them, its HostObserved condition says why, or it
// does not read units).
func unitsRed(named []nwv1.SystemdUnitName, reported *nwv1.HostOSStatus) []string {
	var red []string
	for _, name := range named {
		var u *nwv1.SystemdUnitStatus
		if reported != nil {
			if i := slices.IndexFunc(reported.SystemdUnits, func(u nwv1.SystemdUnitStatus) bool { return u.Name == string(name) }); i >= 0 {
				u = &reported.SystemdUnits[i]
			}
		}
		switch {
		case u == nil:
			red = append(red, fmt.Sprintf("unit %s is not reported by the agent", name))
		case u.ActiveState != "active":
			msg := fmt.Sprintf("unit %s is %s/%s", name, u.ActiveState, u.SubState)
			if u.LoadState != "loaded" {
				msg += " (" + u.LoadState + ")"
			}
			red = append(red, msg)
		}
	}
	return red
}

// summarise sets the kubectl columns and the conditions from the nodes' records.
func summarise(p *nwv1.BootRecoveryPolicy, now metav1.Time) {
	var fell, recovery, unhealthy, waiting, fellMsgs []string
	for i := range p.Status.Nodes {
		n := &p.Status.Nodes[i]
		if fb := n.Unacknowledged(); fb != nil {
			fell = append(fell, n.Name)
			fellMsgs = append(fellMsgs, FallbackMessage(n.Name, fb))
		}
		if n.BootEntry == nwv1.KairosBootRecovery {
			recovery = append(recovery, n.Name)
		}
		if h := n.PostBootHealth; h != nil {
			switch {
			case h.TimedOutAt != nil:
				u := fmt.Sprintf("%s (%s)", n.Name, h.Failing)
				if rb := n.Rollback; rb != nil && rb.BootID == h.BootID {
					u += "; " + rollbackState(rb)
				}
				unhealthy = append(unhealthy, u)
			case h.PassedAt == nil:
				waiting = append(waiting, fmt.Sprintf("%s (until %s: %s)", n.Name, h.Deadline.UTC().Format(time.RFC3339), h.Failing))
			}
		}
	}
	p.Status.FellBack, p.Status.Recovery = text.Shorten(strings.Join(fell, ","), 1024), text.Shorten(strings.Join(recovery, ","), 1024)
	names := make([]string, 0, len(unhealthy))
	for _, u := range unhealthy {
		name, _, _ := strings.Cut(u, " ")
		names = append(names, name)
	}
	p.Status.Unhealthy = text.Shorten(strings.Join(names, ","), 1024)
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: text.Shorten(msg, 32768),
			ObservedGeneration: p.Generation, LastTransitionTime: now})
	}
	if len(fell) > 0 {
		msg := strings.Join(fellMsgs, "; ") + ": not acknowledged"
		if p.HoldsUpgrades() {
			msg += "; OSVersionPolicies hold these nodes, pinned to the image they booted, and start no other node's step"
		}
		set(nwv1.ConditionFellBack, metav1.ConditionTrue, ReasonFellBack, msg)
	} else {
		set(nwv1.ConditionFellBack, metav1.ConditionFalse, ReasonNone, "no node's fallback waits for an acknowledgement")
	}
	if len(recovery) > 0 {
		set(nwv1.ConditionRecoveryBoot, metav1.ConditionTrue, ReasonRecoveryBoot, strings.Join(recovery, ", ")+" run their recovery system")
	} else {
		set(nwv1.ConditionRecoveryBoot, metav1.ConditionFalse, ReasonNone, "no node runs its recovery system")
	}
	switch {
	case len(unhealthy) > 0:
		set(nwv1.ConditionPostBootHealthy, metav1.ConditionFalse, ReasonPostBootHealthTimeout, "post-boot health timed out: "+strings.Join(unhealthy, "; "))
	case len(waiting) > 0:
		set(nwv1.ConditionPostBootHealthy, metav1.ConditionUnknown, ReasonWaiting, "waiting for post-boot health: "+strings.Join(waiting, "; "))
	default:
		set(nwv1.ConditionPostBootHealthy, metav1.ConditionTrue, ReasonPostBootHealthy, "every node's current boot passed its post-boot health")
	}
}

// Acknowledgements are the fallbacks AnnotationAcknowledgeFallback acknowledges: node to boot
// ID, from its "node@bootID" entries (separated by commas). An entry without a boot ID
// acknowledges nothing: a fallback is acknowledged by the boot that fell back, so that a later
// fallback of the same node is not acknowledged in advance.
func Acknowledgements(p *nwv1.BootRecoveryPolicy) map[string]string {
	out := map[string]string{}
	for _, e := range strings.Split(p.Annotations[nwv1.AnnotationAcknowledgeFallback], ",") {
		node, boot, ok := strings.Cut(strings.TrimSpace(e), "@")
		if ok && node != "" && boot != "" {
			out[node] = boot
		}
	}
	return out
}

func (r *Reconciler) event(p *nwv1.BootRecoveryPolicy, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(p, typ, reason, text.Shorten(msg, 1024))
	}
}

// record builds an audit record of node's boot; occurrence tells its boots apart, so that a
// record built again after a crash is the same one.
func (r *Reconciler) record(p *nwv1.BootRecoveryPolicy, action, from, to, reason, msg, occurrence string, at metav1.Time, node string, details ...audit.Detail) audit.Record {
	subject := audit.Subject{APIVersion: nwv1.GroupVersion.String(), Kind: "BootRecoveryPolicy", Name: p.Name, UID: p.UID, Generation: p.Generation}
	details = append([]audit.Detail{{Name: "node", Value: node}}, details...)
	return audit.Transition(subject, r.Actor, action, from, to, reason, msg, occurrence, at.Time, details...)
}

// appendRecords appends the records before the status that shows what they record is
// written, so that no boot the status shows lacks its record.
func (r *Reconciler) appendRecords(ctx context.Context, records []audit.Record) error {
	if r.Audit == nil || len(records) == 0 {
		return nil
	}
	if _, err := r.Audit.Append(ctx, records...); err != nil {
		return fmt.Errorf("recording %d boot events in the audit trail: %w", len(records), err)
	}
	return nil
}

func equalStatus(a, b *nwv1.BootRecoveryPolicy) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status)
}

// rollbackState says where a boot's rollback stands, for the PostBootHealthy condition.
func rollbackState(rb *nwv1.BootRepairStatus) string {
	if rb.Policy == "" {
		return rb.Message
	}
	return fmt.Sprintf("its rollback, OSVersionPolicy %s (%s), is %s", rb.Policy, rb.Image, orPending(rb.Phase))
}

func orPending(phase string) string {
	if phase == "" {
		return string(nwv1.WorkflowPending)
	}
	return phase
}
