// Command nodewright-audit checks Nodewright's audit trail and makes its signing keys; see
// docs/audit.md.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spectrocloud/nodewright/internal/audit"
)

const usage = `usage:
  nodewright-audit verify --public-key FILE [--public-key FILE]... [--trusted-checkpoint FILE]
                          [--allow-partial] [--json] FILE|DIR...
  nodewright-audit keygen --private-key FILE --public-key FILE

verify reads the files in the order given (a directory stands for its audit-*.jsonl files, in
order) as one chain. Exit codes: 0 the chain verifies, 1 tampering or damage found, 2 bad input.
`

// Exit codes.
const (
	exitOK       = 0
	exitTampered = 1
	exitBadInput = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program minus process setup, so tests can drive it.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitBadInput
	}
	var err error
	code := exitOK
	switch args[0] {
	case "verify":
		code, err = verify(args[1:], stdout, stderr)
	case "keygen":
		err = keygen(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprint(stderr, usage)
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodewright-audit: %v\n", err)
		return exitBadInput
	}
	return code
}

// repeated collects a flag given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func verify(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("nodewright-audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var keyFiles repeated
	fs.Var(&keyFiles, "public-key", "public key file (PEM, or 32 bytes raw, hex or base64); repeat across a key rotation (required)")
	trustedFile := fs.String("trusted-checkpoint", "", "a checkpoint line kept outside the trail; the trail must still reach it")
	allowPartial := fs.Bool("allow-partial", false, "accept a trail whose oldest files were removed (it starts after seq 0)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return exitBadInput, err
	}
	if len(keyFiles) == 0 {
		return exitBadInput, errors.New("verify: --public-key is required: without it the checkpoints prove nothing")
	}
	if fs.NArg() == 0 {
		return exitBadInput, errors.New("verify: no audit files given")
	}
	opts := audit.VerifyOptions{AllowPartial: *allowPartial}
	for _, f := range keyFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return exitBadInput, fmt.Errorf("reading the public key: %w", err)
		}
		key, err := audit.ParsePublicKey(data)
		if err != nil {
			return exitBadInput, fmt.Errorf("%s: %w", f, err)
		}
		opts.PublicKeys = append(opts.PublicKeys, key)
	}
	if *trustedFile != "" {
		cp, err := readTrusted(*trustedFile)
		if err != nil {
			return exitBadInput, err
		}
		opts.Trusted = cp
	}
	files, err := expand(fs.Args())
	if err != nil {
		return exitBadInput, err
	}
	report, err := audit.VerifyFiles(opts, files...)
	if err != nil {
		return exitBadInput, err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return exitBadInput, fmt.Errorf("writing the report: %w", err)
		}
	} else {
		printReport(stdout, report)
	}
	if !report.OK {
		return exitTampered, nil
	}
	return exitOK, nil
}

// readTrusted reads a checkpoint line as the trail holds it (the last line of a file closed
// cleanly, say), checking the line on its own; its signature is checked by the verification.
func readTrusted(path string) (*audit.Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the trusted checkpoint: %w", err)
	}
	e, err := audit.ParseLine([]byte(strings.TrimSpace(string(data))))
	if err != nil {
		return nil, fmt.Errorf("trusted checkpoint %s: %w", path, err)
	}
	if e.Checkpoint == nil {
		return nil, fmt.Errorf("trusted checkpoint %s: the line is a record, not a checkpoint", path)
	}
	return e.Checkpoint, nil
}

// expand replaces each directory by its chain files, in order.
func expand(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		info, err := os.Stat(a)
		if err != nil {
			return nil, fmt.Errorf("audit file: %w", err)
		}
		if !info.IsDir() {
			files = append(files, a)
			continue
		}
		inDir, err := audit.ChainFiles(a)
		if err != nil {
			return nil, err
		}
		if len(inDir) == 0 {
			return nil, fmt.Errorf("audit directory %s: no audit-*.jsonl files", a)
		}
		files = append(files, inDir...)
	}
	return files, nil
}

func printReport(w io.Writer, r *audit.Report) {
	for _, p := range r.Problems {
		fmt.Fprintf(w, "FAIL %s\n", p)
	}
	if r.ProblemsOmitted > 0 {
		fmt.Fprintf(w, "FAIL ... and %d more problems\n", r.ProblemsOmitted)
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "note: %s\n", warning)
	}
	if r.LastCheckpoint != nil {
		c := r.LastCheckpoint
		fmt.Fprintf(w, "last checkpoint: size %d, head %s, %s, key %s (%s:%d)\n", c.Size, c.Head, c.Time.Format("2006-01-02T15:04:05Z07:00"), c.KeyID, c.File, c.Line)
	}
	verdict := "OK"
	if !r.OK {
		verdict = fmt.Sprintf("TAMPERED OR DAMAGED (%d problems)", len(r.Problems)+r.ProblemsOmitted)
	}
	fmt.Fprintf(w, "%s: %d entries (%d records, %d checkpoints), seq %d..%d, %d files\n",
		verdict, r.Entries, r.Records, r.Checkpoints, r.FirstSeq, r.LastSeq, len(r.Files))
}

func keygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodewright-audit keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	privFile := fs.String("private-key", "", "file to create with the private key, PKCS #8 PEM, mode 0600 (required)")
	pubFile := fs.String("public-key", "", "file to create with the public key, PKIX PEM (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *privFile == "" || *pubFile == "" || fs.NArg() > 0 {
		return errors.New("keygen: --private-key FILE and --public-key FILE, and nothing else, are required")
	}
	priv, pub, err := audit.GenerateKey()
	if err != nil {
		return err
	}
	// Never overwrite: replacing a key by accident would orphan every checkpoint signed with it.
	if err := writeNew(*privFile, priv, 0o600); err != nil {
		return err
	}
	if err := writeNew(*pubFile, pub, 0o644); err != nil {
		return err
	}
	key, err := audit.ParsePublicKey(pub)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "key id %s: private key in %s, public key in %s\n", audit.KeyID(key), *privFile, *pubFile)
	return nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("creating key file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing key file %s: %w", path, err)
	}
	return nil
}
