package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/internal/audit"
)

const tailHelp = `Print the newest records of an audit trail folder (the operator's --audit-dir: JSON Lines
files audit-00000001.jsonl, audit-00000002.jsonl, ...), and with -f keep printing records as
they are appended, across the files the trail rotates into, like tail -f. DIR defaults to
the current folder.

Each record is one line (-o table, the default): time, seq, actor, the object (kind
namespace/name), action, from → to, reason and message, then its details. -o json prints each
entry as the trail stores it (one JSON object per line), -o yaml each as a YAML document (the
same fields; the stored line is what the hashes cover). Checkpoints are left out unless
--checkpoints is given.

-f reads on when the file system notifies a change in the folder (inotify, kqueue, ...); only
where the folder cannot be watched does it look every second instead. A network file system
does not notify changes made by other machines: follow the trail where it is written.

tail does not verify the trail (audit verify does); a line it cannot read is reported on
standard error and skipped.

Exit codes: 0 printed (with -f: until interrupted); 1 the folder cannot be read (missing, not
a folder, unreadable); 2 usage.`

const tailExamples = `  # The last 10 records
  kubectl nodewright audit tail /var/lib/nodewright/audit

  # Follow the trail, as JSON
  kubectl nodewright audit tail -f -o json /var/lib/nodewright/audit

  # Everything, with the checkpoints
  kubectl nodewright audit tail --tail -1 --checkpoints .`

// tailPoll is how often -f looks at the files when the folder cannot be watched (a file system
// that sends no notifications, say); otherwise it reads on only when notified.
var tailPoll = time.Second

// watchFolder watches dir for changes to its files (a variable for the tests).
var watchFolder = func(dir string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

type tailOptions struct {
	dir         string
	lines       int
	follow      bool
	checkpoints bool
	output      string
}

func newAuditTailCommand(f *Factory) *cobra.Command {
	o := &tailOptions{}
	cmd := &cobra.Command{
		Use:     "tail [DIR]",
		Short:   "Print the newest audit records, and with -f follow the trail",
		Long:    tailHelp,
		Example: tailExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s wants at most one DIR, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			o.dir = "."
			if len(args) == 1 {
				o.dir = args[0]
			}
			// A folder that cannot be read is the command failing (1), not its usage.
			info, err := os.Stat(o.dir)
			if err != nil {
				return fmt.Errorf("cannot read the audit trail folder: %w", err)
			}
			if !info.IsDir() {
				return fmt.Errorf("%s is not a folder: give the audit trail's folder (audit verify takes files)", o.dir)
			}
			out := f.Streams().Out
			t := &trailTail{opts: o, out: out, errOut: f.Streams().ErrOut, pal: palette{on: f.Color(out)}}
			return t.run(cmd.Context())
		},
	}
	cmd.Flags().IntVar(&o.lines, "tail", 10, "How many of the newest entries to print first; -1 prints them all.")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "Keep printing entries as they are appended, until interrupted.")
	cmd.Flags().BoolVar(&o.checkpoints, "checkpoints", false, "Print the signed checkpoints too.")
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML)
	return cmd
}

// trailTail prints a trail folder's entries and follows it.
type trailTail struct {
	opts        *tailOptions
	out, errOut io.Writer
	pal         palette

	file    string // the file being followed
	offset  int64  // how far it has been read
	partial []byte // a line not yet complete
}

func (t *trailTail) run(ctx context.Context) error {
	files, err := audit.ChainFiles(t.opts.dir)
	if err != nil {
		return err
	}
	if err := t.printNewest(files); err != nil {
		return err
	}
	if !t.opts.follow {
		return nil
	}
	// The folder's notifications say when to read on: a file written, or created (the trail
	// rotating), renamed or removed. Only where the folder cannot be watched (a file system
	// without notifications, no inotify instances left) is it polled instead.
	var events <-chan fsnotify.Event
	var errs <-chan error
	var poll <-chan time.Time
	var ticker *time.Ticker
	startPolling := func() {
		events, errs = nil, nil
		ticker = time.NewTicker(tailPoll)
		poll = ticker.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	if watcher, err := watchFolder(t.opts.dir); err != nil {
		startPolling()
	} else {
		defer func() { _ = watcher.Close() }()
		events, errs = watcher.Events, watcher.Errors
	}
	// What was appended before the watch began.
	if err := t.readOn(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				startPolling() // the watch ended
			}
		case _, ok := <-errs:
			// Notifications were lost (the queue overflowed): reading on catches up.
			if !ok {
				startPolling()
			}
		case <-poll:
		}
		if err := t.readOn(); err != nil {
			return err
		}
	}
}

// printNewest prints the last opts.lines wanted entries of the files and leaves the tail at
// the end of the last file.
func (t *trailTail) printNewest(files []string) error {
	if len(files) == 0 {
		return nil
	}
	var lines [][]byte // oldest first
	for i := len(files) - 1; i >= 0; i-- {
		data, err := os.ReadFile(files[i])
		if err != nil {
			return err
		}
		if i == len(files)-1 {
			t.file, t.offset = files[i], int64(len(data))
			if cut := bytes.LastIndexByte(data, '\n') + 1; cut < len(data) {
				// A line still being written: read it with the rest when it is complete.
				t.offset, data = int64(cut), data[:cut]
			}
		}
		var wanted [][]byte
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			if len(l) > 0 && t.wanted(l) {
				wanted = append(wanted, l)
			}
		}
		lines = append(wanted, lines...)
		if t.opts.lines >= 0 && len(lines) >= t.opts.lines {
			break
		}
	}
	if t.opts.lines >= 0 && len(lines) > t.opts.lines {
		lines = lines[len(lines)-t.opts.lines:]
	}
	for _, l := range lines {
		t.print(l)
	}
	return nil
}

// wanted reports whether a line is printed: every record, and checkpoints when asked for.
// Lines that do not parse are printed, so that print reports them.
func (t *trailTail) wanted(l []byte) bool {
	return t.opts.checkpoints || !bytes.Contains(l, []byte(`,"checkpoint":{`)) || !bytes.HasPrefix(l, []byte(`{"v":`))
}

// readOn prints what was appended to the followed file since the last read, then moves on to
// the files the trail rotated into.
func (t *trailTail) readOn() error {
	for {
		if t.file != "" {
			if err := t.readFile(); err != nil {
				return err
			}
		}
		files, err := audit.ChainFiles(t.opts.dir)
		if err != nil {
			return err
		}
		i := slices.Index(files, t.file)
		if i+1 >= len(files) {
			return nil
		}
		// A newer file exists: the followed one is complete. What was appended to it
		// between the read above and the rotation is read now, before moving on.
		if err := t.readFile(); err != nil {
			return err
		}
		if len(t.partial) > 0 {
			fmt.Fprintf(t.errOut, "Warning: %s ends with an incomplete line\n", t.file)
		}
		t.file, t.offset, t.partial = files[i+1], 0, nil
	}
}

func (t *trailTail) readFile() error {
	f, err := os.Open(t.file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // rotated away or removed; the folder listing moves on
		}
		return err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() < t.offset {
		// Cut short (a torn last line removed by a restarted operator): read on from its end.
		t.offset, t.partial = info.Size(), nil
		return nil
	}
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	t.offset += int64(len(data))
	data = append(t.partial, data...)
	cut := bytes.LastIndexByte(data, '\n') + 1
	t.partial = slices.Clone(data[cut:])
	for _, l := range bytes.SplitAfter(data[:cut], []byte("\n")) {
		if len(l) > 0 && t.wanted(l) {
			t.print(l)
		}
	}
	return nil
}

// print writes one entry: as stored (-o json), as a YAML document (-o yaml) or as a line for
// a person.
func (t *trailTail) print(l []byte) {
	raw := bytes.TrimSuffix(l, []byte("\n"))
	e, err := audit.ParseLine(raw)
	if err != nil && e.Record == nil && e.Checkpoint == nil {
		fmt.Fprintf(t.errOut, "Warning: %s: skipped a line that is not an audit entry: %v\n", t.file, err)
		return
	}
	switch t.opts.output {
	case outputJSON:
		fmt.Fprintf(t.out, "%s\n", raw)
	case outputYAML:
		doc, err := yaml.JSONToYAML(raw)
		if err != nil {
			fmt.Fprintf(t.errOut, "Warning: %s: skipped a line that is not an audit entry: %v\n", t.file, err)
			return
		}
		fmt.Fprintf(t.out, "---\n%s", doc)
	default:
		fmt.Fprintln(t.out, formatEntry(e, t.pal))
	}
}

// formatEntry is one entry on one line.
func formatEntry(e audit.Entry, p palette) string {
	if cp := e.Checkpoint; cp != nil {
		return p.paint(dim, fmt.Sprintf("%s  seq %d  checkpoint: size %d, head %s, key %s",
			cp.Time.UTC().Format(time.RFC3339Nano), e.Seq, cp.Size, cp.Head, cp.KeyID))
	}
	r := e.Record
	object := r.Subject.Kind + " "
	if r.Subject.Namespace != "" {
		object += r.Subject.Namespace + "/"
	}
	object += r.Subject.Name
	change := r.To
	if r.From != "" {
		change = r.From + " → " + r.To
	}
	s := fmt.Sprintf("%s  seq %d  %s  %s  %s %s", r.Time.UTC().Format(time.RFC3339Nano), e.Seq, r.Actor, object, r.Action, p.paint(bold, change))
	if r.Reason != "" {
		s += "  " + r.Reason
	}
	if r.Message != "" {
		s += ": " + oneLine(r.Message)
	}
	if len(r.Details) > 0 {
		details := make([]string, len(r.Details))
		for i, d := range r.Details {
			details[i] = d.Name + "=" + oneLine(d.Value)
		}
		s += p.paint(dim, "  ["+strings.Join(details, ", ")+"]")
	}
	return s
}
