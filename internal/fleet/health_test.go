package fleet

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/fleetsim"
)

// startSimulated plays n members (test/site/fleetsim) and registers each on the hub by a
// kubeconfig Secret of the member's name. Their watches get no bookmarks: at rest, only
// the hub's TCP keepalives are answered on their connections.
func startSimulated(t *testing.T, hub *apiServer, n int) []*fleetsim.Member {
	t.Helper()
	sim := simulate(t, fleetsim.Options{Members: n, BookmarkInterval: time.Hour})
	for _, m := range sim.Members() {
		kc, err := m.Kubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		createKubeconfigSecret(t, hub, m.Name(), kc)
	}
	return sim.Members()
}

// reachableAs checks a summary's Reachable condition.
func reachableAs(want metav1.ConditionStatus, reason string) func(*fleetv1alpha1.NodewrightClusterSummary) string {
	return func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
		if c == nil || c.Status != want || c.Reason != reason {
			return fmt.Sprintf("Reachable %+v; want %s %s", c, want, reason)
		}
		return ""
	}
}

// TestAMemberHeardIsNotAskedReadyz: a member whose connection stands (its kernel answers the
// hub's TCP keepalives) has answered; the hub asks its /readyz only every ReadyInterval
// (here an hour), where it asked at every check. A member whose link is cut (its kernel
// acknowledges nothing: fleetsim's Cut) is marked NotAnswering all the same, by its
// keepalives alone, while the other stays Answering; it is Answering again once its link
// is mended.
func TestAMemberHeardIsNotAskedReadyz(t *testing.T) {
	hub, _ := startFleetWith(t, 0, func(o *Options) {
		// Neither /readyz nor a poll (which stands for one) in the test's time: only the
		// keepalives can find the cut.
		o.Health = HealthOptions{Interval: time.Second, Timeout: 2 * time.Second, FailureThreshold: 2, ReadyInterval: time.Hour,
			PollInterval: time.Hour}
	})
	members := startSimulated(t, hub, 2)
	cut, other := members[0], members[1]
	for _, m := range members {
		waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
	}

	// Ten checks of each member; before the hub took an open connection as an answer,
	// each was a /readyz. Only a lost connection has one asked now.
	before := []int64{cut.Readyz(), other.Readyz()}
	time.Sleep(10 * time.Second) // the one wait that proves an absence
	for i, m := range members {
		if asked := m.Readyz() - before[i]; asked > 1 {
			t.Errorf("%s was asked /readyz %d times in 10 checks while its connection stood; want at most 1", m.Name(), asked)
		}
	}

	cut.Cut()
	waitSummary(t, hub.Client, cut.Name(), reachableAs(metav1.ConditionFalse, fleetv1alpha1.ReasonNotAnswering))
	waitSummary(t, hub.Client, other.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
	cut.Mend()
	waitSummary(t, hub.Client, cut.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
}

// TestALostConnectionIsCheckedAtOnce: a member whose connection is closed (its API server
// went away; the hub's kernel closes one whose keepalives go unanswered) is checked at
// once, not at its next check's turn, here an hour later: it is marked NotAnswering.
func TestALostConnectionIsCheckedAtOnce(t *testing.T) {
	hub, _ := startFleetWith(t, 0, func(o *Options) {
		o.Health = HealthOptions{Interval: time.Hour, Timeout: 2 * time.Second, FailureThreshold: 2}
	})
	m := startSimulated(t, hub, 1)[0]
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
	m.Stop()
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionFalse, fleetv1alpha1.ReasonNotAnswering))
}

// TestAHungMemberIsFoundByReadyz: a member whose API server hangs behind a working link
// (its keepalives and PINGs answered, its requests not) is marked NotAnswering by the /readyz the hub asks
// every ReadyInterval (its poll, which would find it too, an hour apart), and Answering again
// once it answers.
func TestAHungMemberIsFoundByReadyz(t *testing.T) {
	hub, _ := startFleetWith(t, 0, func(o *Options) {
		o.Health = HealthOptions{Interval: 300 * time.Millisecond, Timeout: 2 * time.Second, FailureThreshold: 2, ReadyInterval: 2 * time.Second,
			PollInterval: time.Hour}
	})
	m := startSimulated(t, hub, 1)[0]
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
	m.Freeze()
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionFalse, fleetv1alpha1.ReasonNotAnswering))
	m.Thaw()
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
}

// TestAPollStandsForReadyz: a heard member whose poll is due is not asked /readyz at that
// check: the poll's answers say that its API server answers. With polls as often as the
// ready interval, a member at rest is asked /readyz no more, only polled; a member whose API
// server hangs is still found, by its poll.
//
// The member's NodewrightCluster says its operator's version, as a current operator writes
// it: a poll is one request, the nodes' metadata, and the Deployment is not asked. Once the
// status no longer says it (an operator that predates the field), the Deployment's label is
// polled again.
func TestAPollStandsForReadyz(t *testing.T) {
	hub, _ := startFleetWith(t, 0, func(o *Options) {
		o.Health = HealthOptions{Interval: 300 * time.Millisecond, Timeout: 2 * time.Second, FailureThreshold: 2,
			ReadyInterval: 2 * time.Second, PollInterval: 1500 * time.Millisecond}
	})
	m := startSimulated(t, hub, 1)[0]
	deployment := "/apis/apps/v1/namespaces/nodewright-system/deployments/" + OperatorDeployment
	if err := m.UpdateCluster(func(c *nodewrightv1alpha1.NodewrightCluster) { c.Status.OperatorVersion = "9.9.9" }); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, hub.Client, m.Name(), func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if msg := reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering)(s); msg != "" {
			return msg
		}
		if s.Status.NodewrightVersion != "9.9.9" {
			return fmt.Sprintf("nodewrightVersion %q; want the NodewrightCluster's 9.9.9", s.Status.NodewrightVersion)
		}
		return ""
	})
	readyz, deployments := m.Readyz(), m.Gets(deployment)
	others := m.Requests() - readyz
	time.Sleep(8 * time.Second) // four ready intervals: the one wait that proves an absence
	if asked := m.Readyz() - readyz; asked > 1 {
		t.Errorf("the member was asked /readyz %d times in four ready intervals while it was polled every 1.5s; want at most 1", asked)
	}
	if n := m.Requests() - m.Readyz() - others; n < 4 {
		t.Errorf("the member got %d requests other than /readyz in 8s; want at least 4: a poll every 1.5s", n)
	}
	if n := m.Gets(deployment) - deployments; n != 0 {
		t.Errorf("the member's Deployment was read %d times in 8s while its NodewrightCluster says the operator's version; want 0", n)
	}
	if err := m.UpdateCluster(func(c *nodewrightv1alpha1.NodewrightCluster) { c.Status.OperatorVersion = "" }); err != nil {
		t.Fatal(err)
	}
	// Until the next poll reads the Deployment, the summary keeps the version it last knew
	// (the Deployment's label is a poll away, and a summary with no version would say less).
	blank := false
	waitSummary(t, hub.Client, m.Name(), func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if s.Status.NodewrightVersion == "" && !blank {
			blank = true
			t.Errorf("the summary showed no nodewrightVersion once the NodewrightCluster no longer said it; want 9.9.9 until the Deployment is read")
		}
		if s.Status.NodewrightVersion != fleetsim.NodewrightVersion {
			return fmt.Sprintf("nodewrightVersion %q; want the Deployment's label %s", s.Status.NodewrightVersion, fleetsim.NodewrightVersion)
		}
		return ""
	})
	testenv.Eventually(t, patience, func() string {
		if m.Gets(deployment) == deployments {
			return "the Deployment not read again once the NodewrightCluster no longer says the operator's version"
		}
		return ""
	})
	m.Freeze()
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionFalse, fleetv1alpha1.ReasonNotAnswering))
	m.Thaw()
	waitSummary(t, hub.Client, m.Name(), reachableAs(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
}

// countingPoller says it read the member from its fail-th poll on.
type countingPoller struct {
	mu    sync.Mutex
	polls int
	fail  int
}

func (p *countingPoller) Poll(context.Context, string, rest.Interface) pollResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls++
	return pollResult{read: p.polls > p.fail}
}

func (p *countingPoller) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.polls
}

// checkOne runs a Checker with the pollers on the member cl, named "m", until ctx ends.
func checkOne(ctx context.Context, t *testing.T, cl cluster.Cluster, opts HealthOptions, pollers ...poller) *Checker {
	t.Helper()
	c := NewChecker(opts, pollers...)
	go func() { _ = c.Start(ctx) }()
	go func() { // the summaries' end of the events
		for range c.Events() {
		}
	}()
	if err := c.Engage(ctx, "m", cl); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAPollThatDidNotReadIsRetriedAtTheNextCheck: what the hub polls (a member's Deployment
// version, its nodes' boots) is polled at every check until a poll read it, then every
// PollInterval (here an hour): a member whose first poll came too early, or timed out in a
// crowded start-up, does not wait a whole PollInterval for its summary.
func TestAPollThatDidNotReadIsRetriedAtTheNextCheck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim, err := fleetsim.Start(ctx, fleetsim.Options{Members: 1, BookmarkInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	kc, err := sim.Members()[0].Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	opts := HealthOptions{Interval: 100 * time.Millisecond, Timeout: 5 * time.Second, FailureThreshold: 2, PollInterval: time.Hour}
	cl, err := newMemberCluster(cfg, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingPoller{fail: 3}
	checkOne(ctx, t, cl, opts, p)
	testenv.Eventually(t, patience, func() string {
		if n := p.count(); n < 4 {
			return fmt.Sprintf("polled %d times; want 4: three that did not read, then one that did", n)
		}
		return ""
	})
	time.Sleep(2 * time.Second) // twenty checks: the one wait that proves an absence
	if n := p.count(); n != 4 {
		t.Errorf("polled %d times; want 4, then none until the poll interval (an hour) passed", n)
	}
}

// oneMember plays one empty member until the test ends, and returns it with the hub's
// configuration for it.
func oneMember(t *testing.T) (*fleetsim.Member, *rest.Config) {
	t.Helper()
	m := simulate(t, fleetsim.Options{Members: 1, Empty: true, BookmarkInterval: time.Hour}).Members()[0]
	kc, err := m.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

// TestAVersionNotAnsweredIsAskedAgainAtTheNextCheck: a member whose first /version timed out
// (as in a crowded start-up) is asked it again at its next check, not a ready interval (here
// an hour) later, though it answered /readyz and its connection stands.
func TestAVersionNotAnsweredIsAskedAgainAtTheNextCheck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, cfg := oneMember(t)
	// The first check asks /readyz, then /version, within one timeout: each answered after
	// 0.7s, the second times out.
	opts := HealthOptions{Interval: 100 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, ReadyInterval: time.Hour, PollInterval: time.Hour}
	cl, err := newMemberCluster(cfg, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Slow(700 * time.Millisecond)
	c := checkOne(ctx, t, cl, opts)
	testenv.Eventually(t, patience, func() string {
		if n := m.Requests(); n < 2 {
			return fmt.Sprintf("%d requests; want /readyz and /version", n)
		}
		return ""
	})
	m.Slow(0)
	testenv.Eventually(t, patience, func() string {
		if h := c.Health("m"); !h.Reachable || h.KubernetesVersion == "" {
			return fmt.Sprintf("health %+v after %d requests, %d of them /readyz", h, m.Requests(), m.Readyz())
		}
		return ""
	})
}

// fixedPoller finds what it is told.
type fixedPoller struct{ r pollResult }

func (p fixedPoller) Poll(context.Context, string, rest.Interface) pollResult { return p.r }

// TestWhatAPollSaysOfAMember: a poll standing for /readyz says the member answers when it got
// a definite answer (an error such as NotFound included); that it does not when its first
// request got no answer; and asks /readyz when it cannot tell: a 5xx or 429 (a proxy whose
// cluster is gone), a refused credential, a timeout after other answers, nothing asked.
func TestWhatAPollSaysOfAMember(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	member, cfg := oneMember(t)
	opts := HealthOptions{Interval: time.Second, Timeout: 5 * time.Second, FailureThreshold: 2}
	cl, err := newMemberCluster(cfg, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := memberREST(cl)
	if err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	timeout := context.DeadlineExceeded
	for _, c := range []struct {
		name   string
		polls  []pollResult
		reason string
		readyz bool
	}{
		{"read", []pollResult{{read: true, answered: true}, {read: true, answered: true}}, fleetv1alpha1.ReasonAnswering, false},
		{"not found", []pollResult{{read: true, answered: true, err: apierrors.NewNotFound(gr, "x")}, {read: true, answered: true}}, fleetv1alpha1.ReasonAnswering, false},
		{"no answer", []pollResult{{err: timeout}, {read: true, answered: true}}, fleetv1alpha1.ReasonNotAnswering, false},
		{"503", []pollResult{{read: true, answered: true, err: apierrors.NewServiceUnavailable("no cluster")}}, fleetv1alpha1.ReasonAnswering, true},
		{"429", []pollResult{{read: true, answered: true, err: apierrors.NewTooManyRequests("later", 1)}}, fleetv1alpha1.ReasonAnswering, true},
		{"forbidden", []pollResult{{read: true, answered: true, err: apierrors.NewForbidden(gr, "x", errors.New("no"))}}, fleetv1alpha1.ReasonAnswering, true},
		{"a timeout after an answer", []pollResult{{read: true, answered: true}, {err: timeout}}, fleetv1alpha1.ReasonAnswering, true},
		{"nothing asked", []pollResult{{read: true}, {}}, fleetv1alpha1.ReasonAnswering, true},
	} {
		var pollers []poller
		for _, r := range c.polls {
			pollers = append(pollers, fixedPoller{r})
		}
		checker := NewChecker(opts, pollers...)
		m := &memberHealth{name: "m", ctx: ctx, rc: rc, polling: true}
		before := member.Readyz()
		_, h := checker.pollAsCheck(m)
		if h.Reason != c.reason || h.Reachable != (c.reason == fleetv1alpha1.ReasonAnswering) {
			t.Errorf("%s: health %+v; want %s", c.name, h, c.reason)
		}
		if asked := member.Readyz() > before; asked != c.readyz {
			t.Errorf("%s: /readyz asked: %v; want %v", c.name, asked, c.readyz)
		}
		if m.polling {
			t.Errorf("%s: still polling", c.name)
		}
	}
}

// TestALostConnectionMovesTheNextCheck: the scheduler's rule for a member whose connection is
// lost (Checker.lost), on a Checker that runs no check: between checks, its next check is due
// at once rather than an interval later; while a check runs, the next is due as soon as that
// one ends. A member already suspect keeps its turn.
func TestALostConnectionMovesTheNextCheck(t *testing.T) {
	c := NewChecker(HealthOptions{Interval: time.Hour})
	m := &memberHealth{name: "m", ctx: context.Background(), index: -1, health: answering, answered: func() {}}
	c.members[m.name] = m
	soon := func(when string) {
		t.Helper()
		if wait := time.Until(m.next); wait > time.Minute {
			t.Errorf("%s: the next check is due in %s; want at once", when, wait.Round(time.Second))
		}
	}

	c.finish(m, time.Now(), askReadyz, answering)
	if wait := time.Until(m.next); wait < 59*time.Minute {
		t.Fatalf("the next check is due in %s; want an interval, an hour", wait.Round(time.Second))
	}
	c.lost(m)
	soon("lost between checks")

	heap.Remove(&c.due, m.index) // its check begins
	c.lost(m)
	c.finish(m, time.Now(), askReadyz, answering)
	soon("lost while a check ran")

	heap.Remove(&c.due, m.index)
	c.finish(m, time.Now(), askReadyz, answering)
	m.failures = 1 // suspect: a check failed since
	c.lost(m)
	if wait := time.Until(m.next); wait < 59*time.Minute {
		t.Errorf("a suspect member's next check is due in %s; want its turn, an hour", wait.Round(time.Second))
	}
}

// TestAConnectionCountsOnceTheMemberSentSomething: the transport's count of a member's open
// connections (heard), on real TCP connections over loopback. A connection TCP connected but
// over which the member sent nothing does not count (the member's kernel alone completed the
// handshake: the simulator's cut link does so); the first byte read counts it; its loss, when
// it was the last counted, is said once; a connection never counted says nothing when lost.
func TestAConnectionCountsOnceTheMemberSentSomething(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	h := &heard{}
	var losses atomic.Int32
	h.onLost(func() { losses.Add(1) })
	ctx := context.Background()
	// Each connection's reads give up after a minute: a regression fails rather than hangs.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := h.dial((&net.Dialer{}).DialContext)(ctx, network, addr)
		if err == nil {
			err = c.SetReadDeadline(time.Now().Add(time.Minute))
		}
		return c, err
	}

	first, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if h.answers() {
		t.Fatal("a connection over which the member sent nothing counts as its answer")
	}
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if !h.answers() {
		t.Fatal("a connection over which the member sent a byte does not count")
	}

	// A second connection, never read, lost: it says nothing, and the first still counts.
	second, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = (<-accepted).Close()
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if !h.answers() || losses.Load() != 0 {
		t.Fatalf("after a connection never counted was lost: answers %v, %d losses said; want true, 0", h.answers(), losses.Load())
	}

	// The member closes the first: its read fails, the loss is said once (the hub's own
	// close after it says nothing more).
	_ = server.Close()
	if _, err := first.Read(make([]byte, 1)); err == nil {
		t.Fatal("a read of a connection the member closed did not fail")
	}
	_ = first.Close()
	if h.answers() || losses.Load() != 1 {
		t.Fatalf("after the last counted connection was lost: answers %v, %d losses said; want false, 1", h.answers(), losses.Load())
	}

	// A connection lost before the member sent anything, when none counts: nothing is said
	// (the member's check finds out for itself).
	third, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = third.Close() })
	_ = (<-accepted).Close()
	if _, err := third.Read(make([]byte, 1)); err == nil {
		t.Fatal("a read of a connection the member closed did not fail")
	}
	if h.answers() || losses.Load() != 1 {
		t.Fatalf("after a connection never counted was lost: answers %v, %d losses said; want false, 1", h.answers(), losses.Load())
	}
}
