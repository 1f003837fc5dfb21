package audit

import (
	"fmt"
	"io"
	"time"
)

// ReportStyle colours the words of the text report that say whether the trail verifies;
// nil leaves them plain.
type ReportStyle func(failed bool, text string) string

// WriteReport writes the report as nodewright-audit verify and kubectl nodewright audit verify
// print it (docs/audit.md, "Verifying"): one "FAIL FILE:LINE seq N: KIND: MESSAGE" line per
// problem listed, so that a script counts or splits them with no special case; then a note of
// the problems not listed, if any; the notes; the last checkpoint; and the verdict.
func WriteReport(w io.Writer, r *Report, style ReportStyle) error {
	if style == nil {
		style = func(_ bool, text string) string { return text }
	}
	for _, p := range r.Problems {
		if _, err := fmt.Fprintf(w, "%s %s\n", style(true, "FAIL"), p); err != nil {
			return err
		}
	}
	var notes []string
	if r.ProblemsOmitted > 0 {
		notes = append(notes, fmt.Sprintf("%d more problems not listed: a report lists the first %d", r.ProblemsOmitted, maxProblems))
	}
	for _, note := range append(notes, r.Warnings...) {
		if _, err := fmt.Fprintf(w, "note: %s\n", note); err != nil {
			return err
		}
	}
	if c := r.LastCheckpoint; c != nil {
		if _, err := fmt.Fprintf(w, "last checkpoint: size %d, head %s, %s, key %s (%s:%d)\n",
			c.Size, c.Head, c.Time.UTC().Format(time.RFC3339), c.KeyID, c.File, c.Line); err != nil {
			return err
		}
	}
	verdict := style(false, "OK")
	if !r.OK {
		verdict = style(true, fmt.Sprintf("TAMPERED OR DAMAGED (%d problems)", len(r.Problems)+r.ProblemsOmitted))
	}
	_, err := fmt.Fprintf(w, "%s: %d entries (%d records, %d checkpoints), seq %d..%d, %d files\n",
		verdict, r.Entries, r.Records, r.Checkpoints, r.FirstSeq, r.LastSeq, len(r.Files))
	return err
}
