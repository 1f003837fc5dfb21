package replicationupgrade_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

// TestOneToTwoNodes: a second node joins; every volume gains a replica there, synchronised
// and verified, quorum is set, the balance task is back as it was, and the node's not-ready
// taint goes.
func TestOneToTwoNodes(t *testing.T) {
	s := newSite(t, siteOptions{}, "up2-a", "up2-b")
	s.startOperator()
	u := s.upgrade("one-to-two", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"up2-b"}, ReplicaCount: 2})
	seenSync := false
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if u.Status.SyncPercent != nil && *u.Status.SyncPercent < 100 && len(u.Status.Syncing) > 0 {
			seenSync = true
		}
		if !u.Status.Phase.Finished() {
			return "phase " + string(u.Status.Phase) + "; " + steps(u)
		}
		return ""
	})
	u = s.ended(u, nwv1.WorkflowSucceeded)
	if want := []string{"Preflight", "Place", "Sync", "Verify", "Quorum", "ReleaseTaints"}; !slices.Equal(stepNames(u), want) {
		t.Errorf("steps %v, want %v", stepNames(u), want)
	}
	if !seenSync {
		t.Error("the status never showed a synchronisation under way")
	}
	if u.Status.OriginalNode != "up2-a" || !slices.Equal(u.Status.DataNodes, []string{"up2-b"}) || !slices.Equal(u.Status.ResourceDefinitions, s.volumes) {
		t.Errorf("recorded original %s, data nodes %v, volumes %v", u.Status.OriginalNode, u.Status.DataNodes, u.Status.ResourceDefinitions)
	}
	v := u.Status.Volumes
	if n := int32(len(s.volumes)); v == nil || v.Total != n || v.Replicas != n || v.Placed != n || v.UpToDate != n || v.Verified != n {
		t.Errorf("volume counts %+v, want %d of each", v, len(s.volumes))
	}
	st := s.sim.State()
	for _, def := range s.volumes {
		for _, node := range s.nodes {
			if r, ok := st.Resources[def+"/"+node]; !ok || r.Diskless || r.Deleting {
				t.Errorf("%s on %s: %+v, %t; want a diskful replica", def, node, r, ok)
			}
		}
		// The new replica went through the LINSTOR gate, which stamped it; the original
		// carries no stamp.
		if got := st.Resources[def+"/up2-b"].Props[linstor.GateStampProp]; got != linstor.GateStampValue {
			t.Errorf("%s on up2-b: %s=%q, want the gate's stamp", def, linstor.GateStampProp, got)
		}
		if got, ok := st.Resources[def+"/up2-a"].Props[linstor.GateStampProp]; ok {
			t.Errorf("%s on up2-a, the original: %s=%q, want none", def, linstor.GateStampProp, got)
		}
	}
	g := st.Groups["vm-disks"]
	if g.SelectFilter["place_count"] != float64(2) && g.SelectFilter["place_count"] != int32(2) && fmt.Sprint(g.SelectFilter["place_count"]) != "2" {
		t.Errorf("place count %v, want 2", g.SelectFilter["place_count"])
	}
	if g.Props[linstor.PropQuorum] != "majority" || g.Props[linstor.PropOnNoQuorum] != "suspend-io" {
		t.Errorf("group properties %v; want quorum majority, on-no-quorum suspend-io", g.Props)
	}
	if got := st.ControllerProps[linstor.PropBalanceResourcesEnabled]; got != "true" {
		t.Errorf("BalanceResourcesEnabled %q, want it back to true", got)
	}
	if slices.Contains(taints(t, "up2-b"), notReady) {
		t.Error("up2-b still carries the not-ready taint")
	}
	// The Managed rollup reads the agents: both nodes now hold data (MultiNode).
	s.reports("up2-b", true)
	if tr := s.trail.Transitions("one-to-two"); len(tr) == 0 || !strings.HasSuffix(tr[len(tr)-1], "Succeeded") {
		t.Errorf("audited transitions %v; want the last to Succeeded", tr)
	}
}

// TestOneToThreeWithTiebreaker: two nodes join, one for data and one as a diskless
// tiebreaker.
func TestOneToThreeWithTiebreaker(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 5}, "up3-a", "up3-b", "up3-c")
	s.startOperator()
	u := s.upgrade("one-to-three", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"up3-b", "up3-c"}, ReplicaCount: 2, TiebreakerNode: "up3-c"})
	u = s.ended(u, nwv1.WorkflowSucceeded)
	st := s.sim.State()
	for _, def := range s.volumes {
		if r, ok := st.Resources[def+"/up3-b"]; !ok || r.Diskless {
			t.Errorf("%s on up3-b: %+v, %t; want a diskful replica", def, r, ok)
		}
		if r, ok := st.Resources[def+"/up3-c"]; !ok || !r.Diskless {
			t.Errorf("%s on up3-c: %+v, %t; want a diskless tiebreaker", def, r, ok)
		}
	}
	if v := u.Status.Volumes; v == nil || v.Replicas != 10 || v.Placed != 10 {
		t.Errorf("volume counts %+v; want 10 replicas placed (5 diskful, 5 tiebreakers)", v)
	}
	for _, n := range []string{"up3-b", "up3-c"} {
		if slices.Contains(taints(t, n), notReady) {
			t.Errorf("%s still carries the not-ready taint", n)
		}
	}
	s.reports("up3-b", true)
	s.reports("up3-c", false)
}

// TestFaultsRollBack: each fault the stand-in (or the played DRBD) can play ends the upgrade
// RolledBack with LINSTOR holding exactly what it held at the start, the taints back.
func TestFaultsRollBack(t *testing.T) {
	cases := []struct {
		name  string
		o     siteOptions
		spec  func(*nwv1.ReplicationUpgradeSpec)
		fault func(s *site, u *nwv1.ReplicationUpgrade)
		// failed is the stage that fails.
		failed replupgrade.Step
	}{{
		name: "stalled-sync", failed: replupgrade.Sync,
		o:    siteOptions{sim: linstorsim.Options{StalledSyncs: []linstorsim.StalledSync{{AtPercent: 40}}}},
		spec: func(spec *nwv1.ReplicationUpgradeSpec) { spec.SyncTimeout = metav1.Duration{Duration: time.Minute} },
	}, {
		name: "satellite-offline", failed: replupgrade.Sync,
		o: siteOptions{sim: linstorsim.Options{SyncTime: time.Hour}},
		fault: func(s *site, u *nwv1.ReplicationUpgrade) {
			s.until(u, func(u *nwv1.ReplicationUpgrade) string {
				if !running(u, replupgrade.Sync) {
					return "Sync is not running; " + steps(u)
				}
				return ""
			})
			must(s.t, s.sim.SetOnline(s.nodes[1], false))
			// The rollback's deletions wait for the satellite.
			s.until(u, func(u *nwv1.ReplicationUpgrade) string {
				if !running(u, replupgrade.RemoveReplicas) || !strings.Contains(message(u, replupgrade.RemoveReplicas), "waiting for LINSTOR to delete") {
					return "the rollback does not wait for the deletions; " + steps(u)
				}
				return ""
			})
			must(s.t, s.sim.SetOnline(s.nodes[1], true))
		},
	}, {
		name: "verify-mismatch", failed: replupgrade.Verify, o: siteOptions{mismatch: true},
	}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t, c.o, fmt.Sprintf("upf%d-a", i), fmt.Sprintf("upf%d-b", i))
			s.startOperator()
			spec := nwv1.ReplicationUpgradeSpec{PeerNodes: []string{s.nodes[1]}, ReplicaCount: 2}
			if c.spec != nil {
				c.spec(&spec)
			}
			u := s.upgrade(c.name, spec)
			if c.fault != nil {
				c.fault(s, u)
			}
			u = s.ended(u, nwv1.WorkflowRolledBack)
			if st := stepState(u, c.failed); st != nwv1.StepFailed {
				t.Errorf("%s is %s, want Failed; steps %s", c.failed, st, steps(u))
			}
			s.sameAsStart()
			if !slices.Contains(taints(t, s.nodes[1]), notReady) {
				t.Errorf("%s lost its not-ready taint", s.nodes[1])
			}
		})
	}
}

// TestSlowGroupModifyNeverBites: with a resource group modify as slow as linstor-server#253,
// the upgrade still succeeds, and quickly: it places every replica itself, in batches, before
// it raises the place count, so the modify has nothing to autoplace.
func TestSlowGroupModifyNeverBites(t *testing.T) {
	s := newSite(t, siteOptions{sim: linstorsim.Options{SlowGroupModify: &linstorsim.SlowGroupModify{PerResource: time.Hour, Placed: 1}}}, "ups-a", "ups-b")
	s.startOperator()
	u := s.upgrade("slow-modify", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"ups-b"}, ReplicaCount: 2})
	s.ended(u, nwv1.WorkflowSucceeded)
}

// TestQuorumAndTaintsRollBack: a cancellation after the taints were released puts everything
// back: taints, quorum options, replicas and tiebreakers, place counts, the balance task.
func TestQuorumAndTaintsRollBack(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 3}, "upq-a", "upq-b", "upq-c")
	s.startOperator()
	u := s.upgrade("cancelled-late", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upq-b", "upq-c"}, ReplicaCount: 2, TiebreakerNode: "upq-c",
		Approval: nwv1.ApprovalManual})
	for _, step := range []replupgrade.Step{replupgrade.Place, replupgrade.Verify, replupgrade.Quorum} {
		s.approve(u, step)
	}
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if !waiting(u, replupgrade.ReleaseTaints) {
			return "ReleaseTaints does not wait for its approval; " + steps(u)
		}
		return ""
	})
	st := s.sim.State()
	if st.Groups["vm-disks"].Props[linstor.PropQuorum] != "majority" {
		t.Fatalf("quorum not set before ReleaseTaints: %v", st.Groups["vm-disks"].Props)
	}
	s.approve(u, replupgrade.ReleaseTaints)
	// Delete it just as ReleaseTaints runs or after; either way the taints come back.
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if stepState(u, replupgrade.ReleaseTaints) == nwv1.StepWaiting || stepState(u, replupgrade.ReleaseTaints) == nwv1.StepPending {
			return "ReleaseTaints has not started"
		}
		return ""
	})
	must(t, env.Client.Delete(context.Background(), u))
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if u.Status.Phase != nwv1.WorkflowRolledBack && u.Status.Phase != nwv1.WorkflowSucceeded {
			return "phase " + string(u.Status.Phase) + "; " + steps(u)
		}
		return ""
	})
	if u.Status.Phase == nwv1.WorkflowSucceeded {
		t.Skip("the upgrade finished before the deletion reached it")
	}
	s.sameAsStart()
	for _, n := range []string{"upq-b", "upq-c"} {
		if !slices.Contains(taints(t, n), notReady) {
			t.Errorf("%s lost its not-ready taint", n)
		}
	}
}

// TestObserveHoldsTheUpgrade: while the cluster is observed (the legacy DaemonSet decides), an
// upgrade waits at its Preflight, held by the Managed gate, and LINSTOR is not changed.
func TestObserveHoldsTheUpgrade(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 2}, "upo-a", "upo-b")
	nwc := &nwv1.NodewrightCluster{}
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc))
	nwc.Status.Management = nwv1.ManagementObserve
	must(t, env.Client.Status().Update(context.Background(), nwc))
	s.startOperator()
	u := s.upgrade("observed", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upo-b"}, ReplicaCount: 2})
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		held := heldReason(u)
		if !waiting(u, replupgrade.Preflight) || held == "" || held == nwv1.ReasonGatesOpen {
			return fmt.Sprintf("Preflight is not held (held by %q); %s", held, steps(u))
		}
		return ""
	})
	if diff := stateDiff(s.start, s.sim.State()); diff != "" {
		t.Errorf("LINSTOR changed while the upgrade was held:\n%s", diff)
	}
}

// approve approves step once it waits for its approval.
func (s *site) approve(u *nwv1.ReplicationUpgrade, step replupgrade.Step) {
	s.t.Helper()
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if !waiting(u, step) {
			return fmt.Sprintf("%s does not wait; %s", step, steps(u))
		}
		return ""
	})
	cur := &nwv1.ReplicationUpgrade{}
	must(s.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(u), cur))
	base := cur.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[nwv1.AnnotationApprove] = string(step)
	cur.Annotations[nwv1.AnnotationApprovedBy] = "alice"
	must(s.t, env.Client.Patch(context.Background(), cur, client.MergeFrom(base)))
}

func running(u *nwv1.ReplicationUpgrade, step replupgrade.Step) bool {
	return stepState(u, step) == nwv1.StepRunning
}

func waiting(u *nwv1.ReplicationUpgrade, step replupgrade.Step) bool {
	return stepState(u, step) == nwv1.StepWaiting
}

func stepState(u *nwv1.ReplicationUpgrade, step replupgrade.Step) nwv1.StepState {
	for _, st := range u.Status.Steps {
		if st.Name == string(step) {
			return st.State
		}
	}
	return ""
}

func message(u *nwv1.ReplicationUpgrade, step replupgrade.Step) string {
	for _, st := range u.Status.Steps {
		if st.Name == string(step) {
			return st.Message
		}
	}
	return ""
}

func heldReason(u *nwv1.ReplicationUpgrade) string {
	for _, c := range u.Status.Conditions {
		if c.Type == nwv1.ConditionHeld {
			return c.Reason
		}
	}
	return ""
}

// TestSatellites: a joining node LINSTOR does not know yet. Where Piraeus registers
// satellites, the Preflight waits, saying so, until it has; where the profile says Nodewright
// does, the upgrade registers it at the Node's InternalIP, then waits for its pool.
func TestSatellites(t *testing.T) {
	t.Run("piraeus", func(t *testing.T) {
		s := newSite(t, siteOptions{volumes: 2, unregistered: true}, "upsp-a", "upsp-b")
		s.startOperator()
		u := s.upgrade("waits-for-piraeus", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upsp-b"}, ReplicaCount: 2})
		s.until(u, func(u *nwv1.ReplicationUpgrade) string {
			if msg := message(u, replupgrade.Preflight); !strings.Contains(msg, "waiting for the LINSTOR satellites of upsp-b (not registered: Piraeus registers it") {
				return "the Preflight does not wait for the satellite: " + steps(u)
			}
			return ""
		})
		s.register("upsp-b")
		s.ended(u, nwv1.WorkflowSucceeded)
	})
	t.Run("nodewright", func(t *testing.T) {
		s := newSite(t, siteOptions{volumes: 2, unregistered: true, linstor: &nwv1.ProfileLINSTOR{Satellites: nwv1.SatellitesNodewright}}, "upsn-a", "upsn-b")
		s.startOperator()
		u := s.upgrade("registers-it", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upsn-b"}, ReplicaCount: 2})
		s.until(u, func(u *nwv1.ReplicationUpgrade) string {
			if msg := message(u, replupgrade.Preflight); !strings.Contains(msg, "upsn-b has no storage pool lvm-thin") {
				return "the Preflight does not wait for the registered node's pool: " + steps(u)
			}
			return ""
		})
		if n, ok := s.sim.State().Nodes["upsn-b"]; !ok || !n.Online {
			t.Fatalf("upsn-b registered: %t, %+v", ok, n)
		}
		s.addPool("upsn-b")
		s.ended(u, nwv1.WorkflowSucceeded)
	})
}

// TestProfileNamesAnotherLINSTOR: the EdgeProfile in force names a LINSTOR other than the one
// the gate forwards to (its flags, the chart's values): the Preflight fails saying both, and
// LINSTOR is not changed. The operator cannot send the gate elsewhere.
func TestProfileNamesAnotherLINSTOR(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 2, linstor: &nwv1.ProfileLINSTOR{URL: "https://linstor.elsewhere.example:3371",
		ClientSecretRef: &nwv1.NamespacedObjectReference{Namespace: "piraeus-datastore", Name: "linstor-client-tls"}}}, "upp-a", "upp-b")
	s.startOperator()
	u := s.upgrade("another-linstor", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upp-b"}, ReplicaCount: 2})
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if stepState(u, replupgrade.Preflight) != nwv1.StepFailed {
			return "the Preflight has not failed; " + steps(u)
		}
		return ""
	})
	msg := message(u, replupgrade.Preflight)
	for _, want := range []string{"storage.linstor.url is https://linstor.elsewhere.example:3371, the LINSTOR gate forwards to " + s.sim.URL,
		"clientSecretRef is piraeus-datastore/linstor-client-tls, the gate's client Secret " + s.gate.Options.LINSTORClientSecret} {
		if !strings.Contains(msg, want) {
			t.Errorf("the Preflight says %q; want it to say %q", msg, want)
		}
	}
	if diff := stateDiff(s.start, s.sim.State()); diff != "" {
		t.Errorf("LINSTOR changed:\n%s", diff)
	}
}
