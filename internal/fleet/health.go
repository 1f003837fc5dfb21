package fleet

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// HealthOptions bound how fast the hub notices a member that stopped answering: Reachable
// turns False at most FailureThreshold × (Interval + Timeout) after the member was last
// heard (20s with the defaults), and True again at the first answer after that. A member
// whose link is up but whose API server stopped answering requests is noticed within
// ReadyInterval more. A member whose link drops everything is found sooner: its kernel
// closes the connection when its keepalives go unanswered, an interval after the member's
// last packet (userTimeout: 5s; the probes go at 3s and 4s, Go rounding keepAliveIdle up to
// whole seconds), and the check that follows at once (Checker.lost) counts one failure and
// asks /readyz, which fails within a timeout (10s). One that closes its connections is
// found at once.
type HealthOptions struct {
	// Interval between two checks of one member.
	Interval time.Duration
	// Timeout of one check; half of it is left for a TCP keepalive's answer (keepAliveIdle).
	Timeout time.Duration
	// FailureThreshold is how many checks in a row must fail before Reachable turns False,
	// so that one slow answer on a busy link does not flap it.
	FailureThreshold int
	// ReadyInterval is how often a member that is heard is asked /readyz all the same: that
	// its API server answers requests, and still takes the hub's credentials. A poll
	// answered (PollInterval) counts as asked.
	ReadyInterval time.Duration
	// PollInterval is how often what the hub does not watch is read: the nodes' boots, and
	// the operator Deployment's version when the member's NodewrightCluster does not say it.
	// Both change seldom (a boot, an upgrade), and each read is a request to every member.
	PollInterval time.Duration
}

// DefaultHealthOptions are the hub's defaults.
var DefaultHealthOptions = HealthOptions{Interval: 5 * time.Second, Timeout: 5 * time.Second, FailureThreshold: 2,
	ReadyInterval: time.Minute, PollInterval: time.Minute}

// keepAliveIdle is how long a member's connection may receive nothing before its kernel
// sends a TCP keepalive's probe (one follows every second after that): half a timeout
// before userTimeout, so that a probe's answer has about that long; at least a second, and
// rounded up to whole seconds by Go (2.5s is 3s).
func (o HealthOptions) keepAliveIdle() time.Duration {
	return max(o.userTimeout()-o.Timeout/2, time.Second)
}

// userTimeout is how long a member's connection may receive nothing, its probes unanswered,
// before its kernel closes it: an interval, well within the interval and timeout after
// which a silent member counts as a failed check, so that the check that follows the loss
// and its /readyz fit in that bound too. At least a second.
func (o HealthOptions) userTimeout() time.Duration { return max(o.Interval, time.Second) }

// withDefaults fills what is unset: ReadyInterval and PollInterval as 12 intervals.
func (o HealthOptions) withDefaults() HealthOptions {
	if o.Interval <= 0 {
		o.Interval = DefaultHealthOptions.Interval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultHealthOptions.Timeout
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = DefaultHealthOptions.FailureThreshold
	}
	if o.ReadyInterval <= 0 {
		o.ReadyInterval = 12 * o.Interval
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 12 * o.Interval
	}
	return o
}

// Checker checks each engaged member's API server: GET /readyz with the hub's credentials,
// which answers 401 to a credential the member no longer accepts. A member with an open
// connection (which its kernel closes once its TCP keepalives went unanswered for an
// interval: memberTransport) has answered, and is asked /readyz only
// every ReadyInterval: a request costs the hub many times what a keepalive's probe does
// (nothing of its own), and thousands of members would keep it busy. When its poll is due
// (below), the poll's requests are the check's in place of /readyz: their definite answers
// say the member's API server answers, as /readyz would (pollAsCheck), and a member at rest
// is polled every PollInterval (its nodes' list, and its Deployment's metadata when its
// operator predates status.operatorVersion) rather than polled and asked /readyz. A member
// that answered and whose last connection was lost (closed by its kernel for keepalives
// unanswered, or by the member) is checked at once (lost): that counts as one failed check,
// and /readyz is asked. So a link that drops everything is found within FailureThreshold ×
// (Interval + Timeout) of the member's last word, as when every check was a /readyz.
//
// It reads no object: the summary's content comes from watches only. A change of a
// member's health is sent on Events, which the summary controller watches. It also reads
// the member's Kubernetes version, once per engagement, and runs the pollers (what the hub
// does not watch) every PollInterval.
//
// A watch alone cannot tell: an informer whose API server vanished retries quietly, and a
// watch over a link that silently drops packets sees nothing for minutes.
//
// One goroutine schedules every member's checks, the earliest due first, in rounds a
// twentieth of an interval apart (at most 250ms; Start); each check runs in a goroutine of
// its own while it lasts, so that members that do not answer (each holding
// its check for the timeout) delay no other's. A member at rest costs no goroutine.
type Checker struct {
	opts HealthOptions
	// pollers read what the hub does not watch, on every pollEvery-th check that the member
	// answered (the first among them).
	pollers   []poller
	pollEvery int
	events    chan event.TypedGenericEvent[string]
	// stopped is closed when the hub stops: a member's last event is not sent then.
	stopped chan struct{}
	// kick wakes the scheduler when a check became due sooner than it sleeps.
	kick chan struct{}

	mu      sync.Mutex
	members map[string]*memberHealth
	due     dueHeap
}

type memberHealth struct {
	name     string
	ctx      context.Context
	rc       rest.Interface
	health   Health
	failures int
	// answers counts the checks the member answered; polling is set while it is polled,
	// polled once every poller read it.
	answers int
	polling bool
	polled  bool
	// versioned is set once the member answered /version (its version, or an error).
	versioned bool
	// answered says the member answered (its connection is up), once it did.
	answered func()
	// heard counts the member's open connections; asked is when it last answered /readyz.
	heard *heard
	asked time.Time
	// next is when the next check is due; index is its place in the heap, -1 while a check
	// runs or after the member was disengaged.
	next  time.Time
	index int
	gone  bool
	// relost is set when the member's connection was lost while a check ran: the next check
	// is then due as soon as that one ends (lost).
	relost bool
}

// poller reads something of a member that the hub does not watch.
type poller interface {
	Poll(ctx context.Context, member string, rc rest.Interface) pollResult
}

// pollResult is what a poll of a member found.
type pollResult struct {
	// changed: what the member's summary shows changed.
	changed bool
	// read: the poll is done until the next PollInterval: it read the member (which
	// answered, perhaps with an error), or has nothing to ask. Otherwise it is tried again
	// at the next check (it was not engaged yet, or got no answer).
	read bool
	// answered: the member's API server answered a request of the poll (perhaps with an
	// error, in err, or with one of its later requests unanswered).
	answered bool
	// err is the first request's error: the API server's (answered) or why no answer came.
	err error
}

// NewChecker returns a Checker; the manager must Add it to engage it with each member.
func NewChecker(opts HealthOptions, pollers ...poller) *Checker {
	opts = opts.withDefaults()
	return &Checker{opts: opts, events: make(chan event.TypedGenericEvent[string], 64), stopped: make(chan struct{}),
		kick: make(chan struct{}, 1), members: map[string]*memberHealth{},
		pollers: pollers, pollEvery: max(1, int(opts.PollInterval/opts.Interval))}
}

// Events carries the name of each member whose health changed.
func (c *Checker) Events() <-chan event.TypedGenericEvent[string] { return c.events }

// Health is the latest finding for the member.
func (c *Checker) Health(member string) Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.members[member]; ok {
		return m.health
	}
	return Health{}
}

// Start runs the checks that are due until the manager stops.
func (c *Checker) Start(ctx context.Context) error {
	defer close(c.stopped)
	// A round of checks takes every check due by then; the next comes batch later at the
	// soonest, unless a member is engaged or lost (kick). So thousands of members, each due
	// at its own time, wake the scheduler a few times a second rather than at each member's
	// turn; a check is late by less than batch, and members fall into a few rounds.
	batch := min(c.opts.Interval/20, 250*time.Millisecond)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		now := time.Now()
		var heard []*memberHealth
		for len(c.due) > 0 && !c.due[0].next.After(now) {
			m := heap.Pop(&c.due).(*memberHealth)
			if kind := c.begin(m, now); kind != askNothing {
				go c.run(m, now, kind)
			} else {
				heard = append(heard, m)
			}
		}
		wait := time.Hour
		if len(c.due) > 0 {
			wait = max(c.due[0].next.Sub(now), batch)
		}
		c.mu.Unlock()
		// A check that asks nothing ends here, without a goroutine: most checks, at rest.
		for _, m := range heard {
			if c.finish(m, now, askNothing, answering) {
				go c.tell(m)
			}
		}
		if len(heard) > 0 {
			continue // what is due now that time passed
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-timer.C:
		}
	}
}

// Engage checks the member until ctx ends (the member is removed or its credentials
// rotated, which engages it anew).
func (c *Checker) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	// The member's own HTTP client, which follows no redirect (newMemberCluster).
	rc, err := memberREST(cl)
	if err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	m := &memberHealth{name: name, ctx: ctx, rc: rc, next: time.Now(), index: -1, answered: func() { markAnswered(cl) }, heard: heardOf(cl)}
	if m.heard != nil {
		m.heard.onLost(func() { c.lost(m) })
	}
	c.mu.Lock()
	c.members[name] = m
	heap.Push(&c.due, m)
	c.mu.Unlock()
	c.wake()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		m.gone = true
		if m.index >= 0 {
			heap.Remove(&c.due, m.index)
		}
		last := c.members[name] == m // a newer engagement replaced it otherwise
		if last {
			delete(c.members, name)
		}
		c.mu.Unlock()
		if last {
			// The member is no longer engaged (removed, or its new credentials or access did
			// not work): its summary must say so rather than keep its last health.
			select {
			case c.events <- event.TypedGenericEvent[string]{Object: name}:
			case <-c.stopped:
			}
		}
	})
	return nil
}

// lost moves the next check of a member that answers to now: its last connection was lost,
// closed by the member or by the hub's kernel (its keepalives unanswered). That check counts one
// failure and asks /readyz (begin), whose answer or timeout is the second: a member that
// closed its connections and refuses new ones is found at once, rather than after a silence
// and at its next turn. A member already suspect is asked at each of its checks anyway. A
// check running then (a poll, say, which the lost connection fails) is followed by the next
// at once.
func (c *Checker) lost(m *memberHealth) {
	c.mu.Lock()
	now := time.Now()
	answers := !m.gone && m.health.Reachable && m.failures == 0
	m.relost = m.relost || answers && m.index < 0
	soon := answers && m.index >= 0 && m.next.After(now)
	if soon {
		m.next = now
		heap.Fix(&c.due, m.index)
	}
	c.mu.Unlock()
	if soon {
		c.wake()
	}
}

func (c *Checker) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// checkKind is what a check asks the member.
type checkKind int

const (
	// askNothing: a connection to the member stands (heard.answers), and it was asked
	// within the ready interval (or polled): the check makes no request.
	askNothing checkKind = iota
	// askReadyz: the check asks /readyz.
	askReadyz
	// askPolls: the member's poll is due; its requests are the check's.
	askPolls
)

// begin starts a check of the member at start, with c.mu held, and says what it asks.
func (c *Checker) begin(m *memberHealth, start time.Time) checkKind {
	reachable := m.health.Reachable && m.failures == 0
	heard := m.heard.answers()
	switch {
	case reachable && !heard && m.heard != nil:
		// Its last connection was lost: closed by its kernel for keepalives unanswered for
		// an interval, or by the member. That is one failed check;
		// /readyz is the next.
		m.failures++
		return askReadyz
	case !reachable || !heard, !m.versioned:
		// Suspect, or its version not read yet (the first /version timed out in a crowded
		// start-up, say): asked at once rather than a ready interval later.
		return askReadyz
	case len(c.pollers) > 0 && m.polled && !m.polling && m.answers%c.pollEvery == 0:
		m.polling = true
		return askPolls
	case start.Sub(m.asked) >= c.opts.ReadyInterval:
		return askReadyz
	}
	return askNothing
}

// run asks the member what the check asks, then ends the check (finish).
func (c *Checker) run(m *memberHealth, start time.Time, kind checkKind) {
	var h Health
	changed := false
	if kind == askPolls {
		changed, h = c.pollAsCheck(m)
	} else {
		h = c.check(m.ctx, m)
	}
	if c.finish(m, start, kind, h) || changed {
		c.tell(m)
	}
}

// pollAsCheck polls the member and finds its health in the polls' answers: a definite answer
// (a success, or an error of the API server such as NotFound) says that it answers; no answer
// to its first request, that it does not. It asks /readyz when the polls cannot tell: they
// asked nothing; the member refused the hub's credentials (which /readyz tells apart from a
// role that does not allow the poll); it answered 429 or 5xx (a proxy whose cluster is gone,
// an API server whose storage is); or a request timed out after others were answered (a slow
// link, a long list).
func (c *Checker) pollAsCheck(m *memberHealth) (changed bool, h Health) {
	read, answered := true, false
	var noAnswer, unsure error
	for _, p := range c.pollers {
		ctx, cancel := context.WithTimeout(m.ctx, c.opts.Timeout)
		r := p.Poll(ctx, m.name, m.rc)
		cancel()
		changed, read = changed || r.changed, read && r.read
		switch {
		case r.err == nil:
		case !r.answered && !answered:
			noAnswer = r.err
		case !definite(r.err):
			unsure = r.err
		}
		answered = answered || r.answered
		if noAnswer != nil {
			break // a frozen member holds each request for the timeout
		}
	}
	c.mu.Lock()
	m.polling = false
	m.polled = m.polled || read
	c.mu.Unlock()
	switch {
	case noAnswer != nil:
		return changed, notAnswering(noAnswer)
	case unsure != nil || !answered:
		return changed, c.check(m.ctx, m)
	}
	return changed, c.withVersion(m.ctx, m, answering)
}

// definite says the error is a definite answer of the member's API server about the request:
// a 4xx but for 401, 403 and 429.
func definite(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusUnauthorized && code != http.StatusForbidden && code != http.StatusTooManyRequests
}

// finish ends a check of the member that began at start and found h: it polls the member
// when its turn came, schedules its next check one interval after this one began, and says
// whether the member's health changed (the caller tells the summaries).
func (c *Checker) finish(m *memberHealth, start time.Time, kind checkKind, h Health) (changed bool) {
	if h.Reachable || h.Reason == fleetv1alpha1.ReasonUnauthorized {
		m.answered() // the member's connection is up: its watches and reads may begin
	}
	c.mu.Lock()
	if m.gone {
		c.mu.Unlock()
		return false
	}
	if h.Reachable {
		m.failures = 0
		if kind != askNothing {
			m.asked = start
		}
	} else {
		m.failures++
	}
	prev := m.health
	if h.Reachable || m.failures >= c.opts.FailureThreshold || !prev.Known {
		if !h.Reachable && !prev.Known && m.failures < c.opts.FailureThreshold {
			h = Health{} // not known until the threshold is reached
		}
		if h.KubernetesVersion == "" {
			h.KubernetesVersion = prev.KubernetesVersion
		}
		m.health = h
	}
	changed = m.health != prev
	// Until a poll read everything, the member is polled at every check it answered; then
	// every PollInterval, as its check when it was heard (begin). Otherwise in a goroutine
	// of its own: a member that stops answering while it is polled must not hold back its
	// next check. One poll at a time.
	poll := kind != askPolls && h.Reachable && !m.polling && (!m.polled || m.answers%c.pollEvery == 0)
	if h.Reachable {
		m.answers++
	}
	m.polling = m.polling || poll
	m.next = start.Add(c.opts.Interval)
	if m.relost {
		m.next, m.relost = time.Now(), false
	}
	heap.Push(&c.due, m)
	c.mu.Unlock()
	c.wake()
	if poll {
		go c.poll(m)
	}
	if changed {
		ctrllog.FromContext(m.ctx).V(1).Info("Member health changed", "member", m.name, "reachable", h.Reachable, "reason", h.Reason)
	}
	return changed
}

// poll runs the pollers on the member, and says so if what they read changed. The member
// counts as polled once every poller read it.
func (c *Checker) poll(m *memberHealth) {
	changed, read := false, true
	for _, p := range c.pollers {
		ctx, cancel := context.WithTimeout(m.ctx, c.opts.Timeout)
		r := p.Poll(ctx, m.name, m.rc)
		changed, read = changed || r.changed, read && r.read
		cancel()
	}
	c.mu.Lock()
	m.polling = false
	m.polled = m.polled || read
	c.mu.Unlock()
	if changed {
		c.tell(m)
	}
}

// tell sends the member's name to the summaries.
func (c *Checker) tell(m *memberHealth) {
	select {
	case c.events <- event.TypedGenericEvent[string]{Object: m.name}:
	case <-m.ctx.Done():
	}
}

// dueHeap orders the members by their next check.
type dueHeap []*memberHealth

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	m := x.(*memberHealth)
	m.index = len(*h)
	*h = append(*h, m)
}
func (h *dueHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.index = -1
	return m
}

// answering is the health of a member that answers.
var answering = Health{Known: true, Reachable: true, Reason: fleetv1alpha1.ReasonAnswering, Message: "The member's API server answers"}

// check asks the member's /readyz, and its version until it was read once.
func (c *Checker) check(ctx context.Context, m *memberHealth) Health {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	err := m.rc.Get().AbsPath("/readyz").Do(ctx).Error()
	switch {
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return Health{Known: true, Reason: fleetv1alpha1.ReasonUnauthorized, Message: "The member refuses the hub's credentials: " + err.Error()}
	case err != nil:
		return notAnswering(err)
	}
	return c.withVersion(ctx, m, answering)
}

// notAnswering is the health of a member whose API server gave no answer.
func notAnswering(err error) Health {
	return Health{Known: true, Reason: fleetv1alpha1.ReasonNotAnswering, Message: "The member's API server does not answer: " + err.Error()}
}

// withVersion is h with the member's Kubernetes version, read until the member answered
// /version once: with its version, or a lasting refusal (a 4xx but 429, such as a role that
// does not allow /version), not a passing one (a 429, a 5xx).
func (c *Checker) withVersion(ctx context.Context, m *memberHealth, h Health) Health {
	c.mu.Lock()
	versioned := m.versioned
	c.mu.Unlock()
	if versioned {
		return h
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	raw, err := m.rc.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil && !definite(err) && !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err) {
		return h // no answer, or a passing one (a 5xx, say): asked again at the next check
	}
	var v version.Info
	if err == nil && json.Unmarshal(raw, &v) == nil {
		h.KubernetesVersion = v.GitVersion
	}
	c.mu.Lock()
	m.versioned = true
	c.mu.Unlock()
	return h
}
