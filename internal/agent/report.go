package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/kubelite"
)

// FieldManager is the agent's field manager on its node's NodewrightAgentStatus. It owns
// reporter (Agent), storage, network, os and the StorageHealthy and HostObserved conditions;
// the operator's bridge owns role, heartbeat and HeartbeatFresh (docs/agent.md).
const FieldManager = "nodewright-agent"

// ReportInterval is how often the agent reads its host by default.
const ReportInterval = 10 * time.Second

// Reporter keeps the node's NodewrightAgentStatus saying what the host says. It reads the host
// every Interval and when Trigger is called (after an operation), and writes, with server-side
// apply under FieldManager, only when what it would write differs from what it last wrote or
// someone changed that since: at rest it reads its object every Interval and writes nothing.
// It reads and writes its own node's object only, straight from the API server: the agent
// keeps no cache.
type Reporter struct {
	Client   *kubelite.Client
	Node     string
	Observer *HostObserver
	// Interval between reads of the host; ReportInterval when zero.
	Interval time.Duration
	Clock    clock.WithTicker

	once    sync.Once
	trigger chan struct{}
	// applied is what the last apply wrote; nil until one succeeded in this process.
	applied *agentFields
}

// agentFields are the fields of NodewrightAgentStatus.status the agent owns, as applied.
type agentFields struct {
	Reporter nwv1.Reporter           `json:"reporter"`
	Storage  *nwv1.DRBDStatus        `json:"storage,omitempty"`
	Network  *nwv1.NodeNetworkStatus `json:"network,omitempty"`
	OS       *nwv1.HostOSStatus      `json:"os,omitempty"`
	// ReportRequest is the report request this report answers (nwv1.AnnotationReportRequest).
	ReportRequest string             `json:"reportRequest,omitempty"`
	Conditions    []metav1.Condition `json:"conditions"`
}

// agentConditions are the condition types the agent owns.
var agentConditions = []string{nwv1.ConditionStorageHealthy, nwv1.ConditionHostObserved}

// Trigger asks for a report now, without waiting for the interval; it never blocks.
func (r *Reporter) Trigger() {
	r.init()
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

func (r *Reporter) init() {
	r.once.Do(func() { r.trigger = make(chan struct{}, 1) })
}

// Run reports at once, then every interval and on each trigger, until ctx ends. A failed report
// is logged and tried again at the next one: the agent goes on with its other work.
func (r *Reporter) Run(ctx context.Context) error {
	if r.Node == "" || r.Client == nil || r.Observer == nil {
		return fmt.Errorf("the reporter needs its node's name, a client and an observer")
	}
	r.init()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	interval := r.Interval
	if interval <= 0 {
		interval = ReportInterval
	}
	log := klog.FromContext(ctx).WithValues("node", r.Node)
	ticker := r.Clock.NewTicker(interval)
	defer ticker.Stop()
	for {
		if err := r.Report(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Reporting the node failed; trying again", "in", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		case <-r.trigger:
		}
	}
}

// Report reads the host, and writes the node's status if it changed.
func (r *Reporter) Report(ctx context.Context) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	_, err := r.report(ctx)
	return err
}

func (r *Reporter) report(ctx context.Context) (wrote bool, err error) {
	live := &nwv1.NodewrightAgentStatus{}
	err = r.Client.Get(ctx, AgentStatuses.Path("", r.Node), live)
	if kubelite.IsNotFound(err) {
		live = &nwv1.NodewrightAgentStatus{TypeMeta: agentStatusType, ObjectMeta: metav1.ObjectMeta{Name: r.Node}}
		if err = r.Client.Create(ctx, AgentStatuses.Path("", ""), live, nil); err != nil && !kubelite.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating the NodewrightAgentStatus of node %s: %w", r.Node, err)
		}
		r.applied = nil
	} else if err != nil {
		return false, fmt.Errorf("reading the NodewrightAgentStatus of node %s: %w", r.Node, err)
	}

	// The host is read after the object: a report request seen in it is answered by a read
	// made after the request.
	obs := r.Observer.Observe(ctx)
	want := &agentFields{Reporter: nwv1.ReporterAgent, Storage: obs.Storage, Network: obs.Network, OS: obs.OS, ReportRequest: requested(live),
		Conditions: withTransitionTimes(obs.Conditions, live.Status.Conditions, metav1.NewTime(r.Clock.Now().Truncate(time.Second)))}
	if r.applied != nil && sameFields(want, r.applied) && holds(live, r.applied) {
		return false, nil
	}
	if err := r.apply(ctx, want); err != nil {
		return false, err
	}
	r.applied = want
	return true, nil
}

// apply writes the agent's fields to the status subresource. ForceOwnership takes them from
// whoever held them before (the bridge, while the legacy DaemonSet reported the node); the
// agent sends no other field, so it takes nothing else.
func (r *Reporter) apply(ctx context.Context, fields *agentFields) error {
	applied := struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        map[string]string `json:"metadata"`
		Status          *agentFields      `json:"status"`
	}{agentStatusType, map[string]string{"name": r.Node}, fields}
	if err := r.Client.Apply(ctx, AgentStatuses.Path("", r.Node, "status"), applied, FieldManager, true, nil); err != nil {
		return fmt.Errorf("applying the status of node %s: %w", r.Node, err)
	}
	return nil
}

// requested is the report request on the node's object that the agent answers: the annotation's
// value, when it is no longer than nwv1.MaxReportRequest (a longer one is not answered, and the
// agent says so in its log when it follows requests).
func requested(live *nwv1.NodewrightAgentStatus) string {
	if v := live.Annotations[nwv1.AnnotationReportRequest]; len(v) <= nwv1.MaxReportRequest {
		return v
	}
	return ""
}

// FollowRequests watches the node's own NodewrightAgentStatus, and asks for a report (Trigger)
// when it carries a report request (nwv1.AnnotationReportRequest) its status does not answer
// yet. The report then reads the host and writes the request back with what it read. It
// watches that one object (a field selector on its name), until ctx ends.
func (r *Reporter) FollowRequests(ctx context.Context) error {
	if r.Node == "" || r.Client == nil {
		return fmt.Errorf("following report requests needs the node's name and a client")
	}
	r.init()
	log := klog.FromContext(ctx).WithValues("node", r.Node)
	var refused string
	watch := &kubelite.ListWatch{Client: r.Client, Path: AgentStatuses.Path("", ""),
		Options: kubelite.ListOptions{FieldSelector: "metadata.name=" + escapeFieldValue(r.Node)},
		Handle: func(e kubelite.Event) {
			if e.Type == kubelite.Deleted {
				return
			}
			as := &nwv1.NodewrightAgentStatus{}
			if err := json.Unmarshal(e.Object, as); err != nil || as.Name != r.Node {
				return
			}
			want := as.Annotations[nwv1.AnnotationReportRequest]
			switch {
			case want == "" || want == as.Status.ReportRequest:
			case len(want) > nwv1.MaxReportRequest:
				if want != refused {
					refused = want
					log.Info("Not answering a report request longer than the limit", "annotation", nwv1.AnnotationReportRequest, "length", len(want), "limit", nwv1.MaxReportRequest)
				}
			default:
				r.Trigger()
			}
		}}
	return watch.Run(klog.NewContext(ctx, log))
}

// AgentStatuses is the API's resource of NodewrightAgentStatuses.
var AgentStatuses = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "nodewrightagentstatuses"}

var agentStatusType = metav1.TypeMeta{APIVersion: nwv1.GroupVersion.String(), Kind: "NodewrightAgentStatus"}

func toMap(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// sameFields compares two reports as the API server would store them.
func sameFields(a, b *agentFields) bool {
	ma, errA := toMap(a)
	mb, errB := toMap(b)
	return errA == nil && errB == nil && equality.Semantic.DeepEqual(ma, mb)
}

// holds reports whether live still says what the agent last applied: its reporter, each field
// it set, and its conditions. A field it did not set may hold another's value (the bridge's
// until it lets go of it).
func holds(live *nwv1.NodewrightAgentStatus, applied *agentFields) bool {
	st := live.Status
	network := &st.Network
	view := &agentFields{Reporter: st.Reporter, ReportRequest: st.ReportRequest}
	if applied.Storage != nil {
		view.Storage = st.Storage
	}
	if applied.Network != nil {
		view.Network = network
	}
	if applied.OS != nil {
		view.OS = st.OS
	}
	for _, t := range agentConditions {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
			c := *c
			c.ObservedGeneration = 0
			view.Conditions = append(view.Conditions, c)
		}
	}
	return sameFields(view, applied)
}
