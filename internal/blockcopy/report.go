package blockcopy

import (
	"bufio"
	"bytes"
	"encoding/json"
)

// This file builds on every platform, unlike the copier: the tools that show a copy's progress
// (kubectl nodewright, its web UI) read the copier's progress lines from its log.

// Phases reported in progress lines.
const (
	PhaseCopy    = "copy"    // reading, hashing and writing the source
	PhaseVerify  = "verify"  // reading the target back after the copy
	PhaseCompare = "compare" // the verify command reading both volumes
)

// ProgressReport is one progress line: what a person's tools parse from the copier's log and
// a person reads on stderr.
type ProgressReport struct {
	Phase          string  `json:"phase"`
	BytesDone      int64   `json:"bytesDone"`
	BytesTotal     int64   `json:"bytesTotal"`
	BytesPerSecond int64   `json:"bytesPerSecond"`
	EtaSeconds     float64 `json:"etaSeconds"`
	ElapsedSeconds float64 `json:"elapsedSeconds"`
}

// LatestProgress is the last progress line of log, the copier's output with --json
// --progress; nil when it has none. Lines that are not progress (the JSON result, which has a
// bytesTotal too but no phase, or anything else) are skipped.
func LatestProgress(log []byte) *ProgressReport {
	var last *ProgressReport
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var p ProgressReport
		if json.Unmarshal(sc.Bytes(), &p) == nil && p.Phase != "" && p.BytesTotal > 0 {
			last = &p
		}
	}
	return last
}
