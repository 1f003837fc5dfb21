package legacy

import (
	"strconv"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// NodeHealth is one node's freshness at a moment.
type NodeHealth struct {
	Node
	// Stale: no heartbeat, or one older than the threshold.
	Stale bool
	// StaleAt is when a fresh node turns stale unless its heartbeat moves; zero when stale.
	StaleAt time.Time
}

// Rollup is the cluster's health at a moment, derived from an Observation.
type Rollup struct {
	Phase nwv1.ClusterPhase
	Nodes []NodeHealth
	Ready int32
	// NextDeadline is the earliest moment a fresh node turns stale: the time to look again.
	// Zero when no node is fresh.
	NextDeadline time.Time
}

// Roll applies the rollup rules: the state's phase; Unknown when the ConfigMap had problems;
// Degraded when the cluster should be serving (SingleNode, MultiNode) and a node is stale.
func Roll(obs Observation, problems []Problem, now time.Time, staleAfter time.Duration) Rollup {
	r := Rollup{Phase: PhaseOf(obs.State)}
	anyStale := false
	for _, n := range obs.Nodes {
		h := NodeHealth{Node: n}
		if n.Heartbeat.IsZero() || now.Sub(n.Heartbeat) > staleAfter {
			h.Stale, anyStale = true, true
		} else {
			r.Ready++
			// Stale once strictly older than the threshold.
			h.StaleAt = n.Heartbeat.Add(staleAfter + time.Nanosecond)
			if r.NextDeadline.IsZero() || h.StaleAt.Before(r.NextDeadline) {
				r.NextDeadline = h.StaleAt
			}
		}
		r.Nodes = append(r.Nodes, h)
	}
	switch {
	case len(problems) > 0:
		r.Phase = nwv1.ClusterUnknown
	case anyStale && (r.Phase == nwv1.ClusterSingleNode || r.Phase == nwv1.ClusterMultiNode):
		r.Phase = nwv1.ClusterDegraded
	}
	return r
}

// AnomalyKind names a way the legacy machine broke its contract.
type AnomalyKind string

// The anomalies.
const (
	// ForbiddenTransition: previousState → state is not in the table.
	ForbiddenTransition AnomalyKind = "ForbiddenTransition"
	// UnknownPreviousState: previousState is not one of the 21 states, so the transition
	// to state cannot be checked.
	UnknownPreviousState AnomalyKind = "UnknownPreviousState"
	// GenerationJump: the generation moved by more than one since the last observation, so
	// transitions were missed.
	GenerationJump AnomalyKind = "GenerationJump"
	// GenerationRegressed: the generation went backwards (the ConfigMap was reset or
	// recreated).
	GenerationRegressed AnomalyKind = "GenerationRegressed"
)

// Anomaly is one contract violation, with a message for a person.
type Anomaly struct {
	Kind    AnomalyKind
	Message string
}

// Check compares a new observation with the previous one (lastGeneration is the generation
// last observed, 0 when none) and reports contract violations. The same ConfigMap content
// observed twice yields none, so a restarted observer raises no spurious anomaly.
func Check(obs Observation, lastGeneration int64) []Anomaly {
	var out []Anomaly
	if lastGeneration == obs.Generation {
		return nil
	}
	if obs.PreviousState != "" && obs.State != "" && !Allowed(obs.PreviousState, obs.State) {
		out = append(out, Anomaly{ForbiddenTransition,
			"the legacy DaemonSet went from " + string(obs.PreviousState) + " to " + string(obs.State) + ", which its state machine does not allow"})
	}
	if msg := UncheckedTransition(obs); msg != "" {
		out = append(out, Anomaly{UnknownPreviousState, msg})
	}
	switch {
	case lastGeneration == 0:
	case obs.Generation > lastGeneration+1:
		out = append(out, Anomaly{GenerationJump,
			"the legacy generation jumped from " + itoa(lastGeneration) + " to " + itoa(obs.Generation) +
				": " + itoa(obs.Generation-lastGeneration-1) + " transition(s) were not observed"})
	case obs.Generation < lastGeneration:
		out = append(out, Anomaly{GenerationRegressed,
			"the legacy generation went back from " + itoa(lastGeneration) + " to " + itoa(obs.Generation) +
				": the state ConfigMap was reset or recreated"})
	}
	return out
}

// UncheckedTransition says why the transition into obs.State cannot be checked: its
// previousState is not one of the 21 states. Empty when it can be.
func UncheckedTransition(obs Observation) string {
	if obs.UnknownPreviousState == "" || obs.State == "" {
		return ""
	}
	return "the legacy DaemonSet went to " + string(obs.State) + " from previousState " + strconv.Quote(shorten(obs.UnknownPreviousState)) +
		", which is not one of the 21 states: the transition cannot be checked"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
