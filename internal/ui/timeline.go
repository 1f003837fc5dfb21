package ui

import (
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// maxTimeline bounds the transitions kept in memory.
const maxTimeline = 200

// transition is one entry of the cluster's timeline as this UI observed it. The page merges
// these with the legacy DaemonSet's Events and the audit trail's records of the same
// transitions (by legacy generation).
type transition struct {
	// Observed is when this UI saw the new state.
	Observed time.Time `json:"observed"`
	// Since is when the legacy DaemonSet says it entered the state.
	Since      *time.Time        `json:"since,omitempty"`
	From       string            `json:"from,omitempty"`
	To         string            `json:"to"`
	Phase      nwv1.ClusterPhase `json:"phase"`
	Generation int64             `json:"generation"`
	// Source is "status" for the state found when the UI first looked, "live" for a change
	// it saw happen.
	Source string `json:"source"`
	// Missed counts the transitions between this one and the one before that the UI did not
	// see (the legacy generation moved by more than one).
	Missed int64 `json:"missed,omitempty"`
}

// timeline is the transitions seen since the UI started; it outlives the watches.
type timeline struct {
	entries []transition
	last    transition
	seen    bool
}

// observe records the cluster's legacy state when it differs from the last one seen.
func (tl *timeline) observe(nwc *nwv1.NodewrightCluster, now time.Time) (transition, bool) {
	st := nwc.Status
	if st.LegacyState == "" {
		return transition{}, false
	}
	if tl.seen && tl.last.Generation == st.LegacyGeneration && tl.last.To == string(st.LegacyState) {
		return transition{}, false
	}
	t := transition{Observed: now, To: string(st.LegacyState), Phase: st.Phase, Generation: st.LegacyGeneration, Source: "status"}
	if st.LegacyStateSince != nil {
		since := st.LegacyStateSince.Time
		t.Since = &since
	}
	if tl.seen {
		t.Source, t.From = "live", tl.last.To
		if gap := st.LegacyGeneration - tl.last.Generation; gap > 1 {
			t.Missed = gap - 1
		}
	}
	tl.entries = append(tl.entries, t)
	if len(tl.entries) > maxTimeline {
		tl.entries = tl.entries[len(tl.entries)-maxTimeline:]
	}
	tl.last, tl.seen = t, true
	return t, true
}
