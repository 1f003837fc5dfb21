package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// requestCounts are the hub cluster's API server's answers on the summaries, by verb,
// subresource and code, from its apiserver_request_total.
type requestCounts map[string]float64

// summaryRequests reads the hub's API server's count of the requests it answered on the
// summaries.
func (s *apiServer) summaryRequests(ctx context.Context) (requestCounts, error) {
	cs, err := kubernetes.NewForConfig(s.admin)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the hub's API server's metrics: %w", err)
	}
	out := requestCounts{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || label(labels, "resource") != "nodewrightclustersummaries" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		key := label(labels, "verb")
		if sub := label(labels, "subresource"); sub != "" {
			key += " " + sub
		}
		out[key+" "+label(labels, "code")] += v
	}
	return out, sc.Err()
}

// label is the value of one label in a Prometheus sample's label list.
func label(labels, name string) string {
	_, after, ok := strings.Cut(","+labels, ","+name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, `"`)
	return v
}

// printRequests prints the answers between two counts, and the writes per member.
func printRequests(what string, before, after requestCounts, members int) {
	var parts []string
	writes := 0.0
	for _, k := range slices.Sorted(maps.Keys(after)) {
		n := after[k] - before[k]
		if n <= 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s ×%.0f", k, n))
		if verb := strings.Fields(k)[0]; verb == "POST" || verb == "PATCH" || verb == "PUT" || verb == "APPLY" {
			writes += n
		}
	}
	fmt.Printf("    the hub's API server answered on the summaries %s: %s; %.2f writes a member\n", what, strings.Join(parts, ", "), writes/float64(members))
}

// hubServerProfile takes a CPU profile of the hub's API server over seconds, into path.
func (l *lab) hubServerProfile(ctx context.Context, seconds int, path string) error {
	cs, err := kubernetes.NewForConfig(l.hubServer.admin)
	if err != nil {
		return err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("the hub's API server's CPU profile: %w", err)
	}
	return os.WriteFile(path, raw, 0o600)
}
