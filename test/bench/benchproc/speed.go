package benchproc

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"
)

// Speed times a fixed workload on one goroutine (SHA-256 of 16 MiB, and 20,000 JSON round
// trips of a small object, what the Kubernetes processes here spend their cycles on) and
// returns the fastest of five tries: on an idle machine, the speed of one of its cores as it
// is now, which varies from run to run on a shared machine; beside other work, what is left
// of a core for one goroutine. A run's CPU figures, in % of a core, are comparable to another
// run's only together with it.
func Speed() time.Duration {
	type object struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
		Phase  string            `json:"phase"`
		Ready  int32             `json:"ready"`
		Items  []string          `json:"items"`
	}
	in := object{Name: "member-0001", Labels: map[string]string{"site": "edge", "profile": "v1.2.3"}, Phase: "Running", Ready: 3,
		Items: []string{"node-1", "node-2", "node-3"}}
	data := make([]byte, 16<<20)
	best := time.Duration(1<<63 - 1)
	for range 5 {
		start := time.Now()
		sum := sha256.Sum256(data)
		for range 20000 {
			b, _ := json.Marshal(in) // a struct of strings and numbers: it cannot fail
			var out object
			_ = json.Unmarshal(b, &out)
		}
		best = min(best, time.Since(start))
		data[0] = sum[0] // the sum is used: not optimised away
	}
	return best
}

// PrintSpeed prints a Speed measured when as a line of a benchmark's output.
func PrintSpeed(when string, d time.Duration) {
	fmt.Printf("  a fixed single-goroutine workload (benchproc.Speed) %s: %s, the fastest of five\n", when, d.Round(time.Millisecond))
}
