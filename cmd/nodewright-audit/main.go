// Command nodewright-audit checks Nodewright's audit trail, makes its signing keys, keeps and
// ships copies of it, and writes scripted records to a trail; see docs/audit.md.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/spectrocloud/nodewright/internal/audit"
)

const usage = `usage:
  nodewright-audit verify --public-key FILE [--public-key FILE]... [--trusted-checkpoint FILE]
                          [--witnessed-checkpoint FILE --witness-public-key FILE]
                          [--allow-partial] [--json] FILE|DIR...
  nodewright-audit keygen --private-key FILE --public-key FILE
  nodewright-audit append --dir DIR --private-key FILE [--max-file-bytes N] [FILE|-]...
  nodewright-audit serve  --listen ADDR --dir DIR [--tls-cert FILE --tls-key FILE] [--client-ca FILE]
                          [--token-file FILE] [--public-key FILE]... [--witness-key FILE]
                          [--max-file-bytes N]
  nodewright-audit ship   --dir DIR --url URL [--ca FILE] [--cert FILE --key FILE] [--token-file FILE]
                          [--name NAME] [--witnessed FILE] [--until-delivered]

verify reads the files in the order given (a directory stands for its audit-*.jsonl files, in
order) as one chain. Exit codes: 0 the chain verifies, 1 tampering or damage found, 2 bad input.
--witnessed-checkpoint takes a checkpoint countersigned by a witness (serve --witness-key),
checked with the witness's public key: a trail that does not reach it with the same head was
cut, or rewritten (a fork from the witness's copy), even if it was re-signed with the trail's
own key.

A line of the trail is at most 1048576 bytes (1 MiB), its newline not counted: verify reports a
longer one as malformed, serve refuses it and append never writes one.

append writes records to the trail in DIR (created if missing) without a cluster, with the log,
files and key handling of the operator, and closes it with a signed checkpoint: a trail to try
verify, serve and ship on. It reads JSON Lines from the files, or standard input: one record a
line with the members the trail holds ("actor", "action", "subject" {"kind", "name"} required;
"apiVersion", "namespace", "uid", "generation", "from", "to", "reason", "message", "details",
"time" and "id" optional). Without "id", a record's ID is a digest of all its members, "time"
(default: now) included: a line appended again with its time is recognised, and records that
differ in anything are distinct. Two lines with one ID that differ are refused. It prints one
line a record: "seq N: appended: record ID (FILE:LINE)", or "already in the trail" for an ID
the trail holds: the record held stays as it is, and a line with its own "id" is not compared
with it. All records or none are appended. Never point it at a trail a running
operator writes: two writers fork the chain.

serve is the reference receiver: it keeps a copy of a chain shipped to it over HTTP(S) in DIR
(audit-*.jsonl files, as the operator writes them, which verify reads). GET answers where the
copy stands; POST appends a batch that continues it exactly, and refuses anything else whole.
Once listening it prints "receiving into DIR on http(s)://ADDRESS/ (the copy holds N entries)"
on standard output, so that with --listen 127.0.0.1:0 the port it picked can be read there
(":0" alone listens on every interface). Off loopback it refuses to start unless its clients
authenticate: --tls-cert and --tls-key, with --client-ca or --token-file. --public-key makes it
refuse checkpoints not signed by one of the keys (records carry no signature: a batch is
otherwise checked only as the continuation of the copy). With --witness-key (a private key from
keygen, the witness's own, never the trail's) it is the trail's witness: it countersigns the
newest checkpoint of its copy and hands it back in every answer (in "witnessed"); it needs
--public-key. It stops on SIGINT or SIGTERM.

ship sends the chain in DIR (a FileSink directory) to a receiver, each entry once, resuming
where the receiver stands; it follows the files as they grow until stopped, or with
--until-delivered exits 0 once the receiver holds everything the files held. With --witnessed
it writes each witnessed checkpoint the receiver hands back to FILE, for verify.

The protocol is in docs/audit.md, "Shipping to an HTTP endpoint".
`

// stdin is what append reads when given no file, or "-".
var stdin io.Reader = os.Stdin

// Exit codes.
const (
	exitOK       = 0
	exitTampered = 1
	exitBadInput = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program minus process setup, so tests can drive it.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run until ctx ends: serve and ship stop then.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
	case "append":
		err = appendRecords(ctx, args[1:], stdin, stdout, stderr)
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr)
	case "ship":
		err = ship(ctx, args[1:], stdout, stderr)
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
	trustedFile := fs.String("trusted-checkpoint", "", "a checkpoint line kept outside the trail; the trail must still reach it (a shorter trail is truncated); with --allow-partial, a trail that starts after it only gets a note that it was not checked")
	witnessedFile := fs.String("witnessed-checkpoint", "", "a checkpoint countersigned by the trail's witness (serve --witness-key); the trail must reach it with the same head: a trail that differs forks from the witness's copy")
	var witnessKeyFiles repeated
	fs.Var(&witnessKeyFiles, "witness-public-key", "the witness's public key, for --witnessed-checkpoint; repeat across a rotation")
	allowPartial := fs.Bool("allow-partial", false, "accept a trail whose oldest files were removed (it starts after seq 0)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return exitBadInput, err
	}
	if (*witnessedFile == "") != (len(witnessKeyFiles) == 0) {
		return exitBadInput, errors.New("verify: --witnessed-checkpoint and --witness-public-key go together")
	}
	if len(keyFiles) == 0 {
		return exitBadInput, errors.New("verify: --public-key is required: without it the checkpoints prove nothing")
	}
	if fs.NArg() == 0 {
		return exitBadInput, errors.New("verify: no audit files given")
	}
	opts := audit.VerifyOptions{AllowPartial: *allowPartial}
	keys, err := audit.ReadPublicKeys(keyFiles)
	if err != nil {
		return exitBadInput, err
	}
	opts.PublicKeys = keys
	if *trustedFile != "" {
		cp, err := audit.ReadTrustedCheckpoint(*trustedFile)
		if err != nil {
			return exitBadInput, err
		}
		opts.Trusted = cp
	}
	if *witnessedFile != "" {
		if opts.WitnessKeys, err = audit.ReadPublicKeys(witnessKeyFiles); err != nil {
			return exitBadInput, err
		}
		if opts.Witnessed, err = audit.ReadWitnessed(*witnessedFile); err != nil {
			return exitBadInput, err
		}
	}
	files, err := audit.ExpandChainFiles(fs.Args())
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
	} else if err := audit.WriteReport(stdout, report, nil); err != nil {
		return exitBadInput, fmt.Errorf("writing the report: %w", err)
	}
	if !report.OK {
		return exitTampered, nil
	}
	return exitOK, nil
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

// writeReplacing replaces path's content whole: a reader sees the old file or the new one.
func writeReplacing(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
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

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodewright-audit serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port; port 0 picks a free one, and no host means every interface (required)")
	dir := fs.String("dir", "", "directory of the copy, created if missing (required)")
	certFile := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (chain)")
	keyFile := fs.String("tls-key", "", "the PEM private key of --tls-cert")
	clientCA := fs.String("client-ca", "", "PEM bundle; require a client certificate signed by one of these (needs --tls-cert)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token every request must carry")
	var keyFiles repeated
	fs.Var(&keyFiles, "public-key", "the trail's public key: refuse checkpoints not signed by one of these as they arrive; repeat across a key rotation (required with --witness-key)")
	witnessKeyFile := fs.String("witness-key", "", "be the trail's witness: countersign the copy's newest checkpoint with this private key (PKCS #8 PEM from keygen, the witness's own)")
	maxFileBytes := fs.Int64("max-file-bytes", audit.DefaultMaxFileBytes, "size at which the copy starts a new file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" || *dir == "" || fs.NArg() > 0 {
		return errors.New("serve: --listen ADDR and --dir DIR, and no arguments, are required")
	}
	if (*certFile == "") != (*keyFile == "") || (*clientCA != "" && *certFile == "") {
		return errors.New("serve: --tls-cert and --tls-key go together, and --client-ca needs them")
	}
	authenticated := *clientCA != "" || (*tokenFile != "" && *certFile != "")
	if !authenticated && !loopbackHost(*listen) {
		return fmt.Errorf("serve: --listen %s is off loopback, and a receiver other machines can reach must authenticate its clients: "+
			"give --tls-cert and --tls-key with --client-ca or --token-file (a token only over TLS), or listen on 127.0.0.1 or [::1]", *listen)
	}
	if *witnessKeyFile != "" && len(keyFiles) == 0 {
		return errors.New("serve: --witness-key needs --public-key: the witness countersigns only checkpoints whose signature it checked")
	}
	opts := audit.ReceiverOptions{MaxFileBytes: *maxFileBytes}
	var err error
	if opts.Token, err = readToken(*tokenFile); err != nil {
		return err
	}
	if opts.PublicKeys, err = audit.ReadPublicKeys(keyFiles); err != nil {
		return err
	}
	if *witnessKeyFile != "" {
		pem, err := os.ReadFile(*witnessKeyFile)
		if err != nil {
			return fmt.Errorf("serve: --witness-key: %w", err)
		}
		if opts.Witness, err = audit.LoadSigner(pem); err != nil {
			return fmt.Errorf("serve: --witness-key %s: %w", *witnessKeyFile, err)
		}
		for _, k := range opts.PublicKeys {
			if audit.KeyID(k) == opts.Witness.KeyID() {
				return errors.New("serve: --witness-key is one of the trail's keys (--public-key): the witness needs a key of its own, which the trail's writer does not hold")
			}
		}
	}
	var tlsConfig *tls.Config
	if *certFile != "" {
		if tlsConfig, err = serverTLS(*certFile, *keyFile, *clientCA); err != nil {
			return err
		}
	}
	recv, err := audit.OpenReceiver(*dir, opts)
	if err != nil {
		return err
	}
	defer func() { _ = recv.Close() }() // closed explicitly below once the server stopped
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !authenticated && (!ok || !tcp.IP.IsLoopback()) {
		_ = ln.Close()
		return fmt.Errorf("serve: --listen %s is bound to %s, off loopback, without authentication: give --tls-cert and --tls-key with --client-ca or --token-file", *listen, ln.Addr())
	}
	scheme := "http"
	if tlsConfig != nil {
		ln, scheme = tls.NewListener(ln, tlsConfig), "https"
	}
	srv := &http.Server{
		Handler:           logRefusals(recv, stderr),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute, // a batch of DefaultMaxBodyBytes over a slow link
		IdleTimeout:       2 * time.Minute,
	}
	fmt.Fprintf(stdout, "receiving into %s on %s://%s/ (the copy holds %d entries)\n", *dir, scheme, ln.Addr(), recv.Head().Next)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		return fmt.Errorf("serve: stopping: %w", err)
	}
	return recv.Close()
}

// loopbackHost says whether the host of a host:port is a loopback address (or "localhost"):
// an empty host, like 0.0.0.0 or [::], listens on every interface.
func loopbackHost(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serverTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCA != "" {
		data, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("serve: reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("serve: no PEM certificate in %s", clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// readToken reads a bearer token file ("" for none); surrounding whitespace, as a file or a
// Secret often has, is not part of it.
func readToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("the token file %s is empty", path)
	}
	return token, nil
}

// logRefusals writes a line for every request answered with an error status: a 409 now and
// then is a shipper finding its place after a lost answer; anything else deserves a look.
func logRefusals(h http.Handler, w io.Writer) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: rw, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if rec.status >= 400 {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "%s %s %s %s: %d %s\n", time.Now().UTC().Format(time.RFC3339), r.RemoteAddr, r.Method,
				r.Header.Get(audit.FirstSeqHeader), rec.status, http.StatusText(rec.status))
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func ship(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodewright-audit ship", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the chain's directory, as the operator's FileSink writes it (required)")
	url := fs.String("url", "", "the receiver, https://host/path (required)")
	caFile := fs.String("ca", "", "PEM bundle trusted to sign the receiver's certificate (default: the system's)")
	certFile := fs.String("cert", "", "PEM client certificate, for a receiver that asks for one")
	keyFile := fs.String("key", "", "the PEM private key of --cert")
	tokenFile := fs.String("token-file", "", "file holding the bearer token to send")
	name := fs.String("name", "cli", "names this shipper's cursor file (ship-NAME.cursor in --dir)")
	until := fs.Bool("until-delivered", false, "exit once the receiver holds every entry the files hold")
	witnessedFile := fs.String("witnessed", "", "write each witnessed checkpoint a witness hands back to this file (replaced each time), for verify --witnessed-checkpoint")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *url == "" || fs.NArg() > 0 {
		return errors.New("ship: --dir DIR and --url URL, and no arguments, are required")
	}
	if info, err := os.Stat(*dir); err != nil || !info.IsDir() {
		return fmt.Errorf("ship: %s is not a directory", *dir)
	}
	opts := audit.ShipperOptions{URL: *url, Name: *name,
		Logger: funcr.New(func(_, args string) { fmt.Fprintln(stderr, args) }, funcr.Options{})}
	var err error
	if opts.BearerToken, err = readToken(*tokenFile); err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		into *[]byte
	}{{*caFile, &opts.CA}, {*certFile, &opts.ClientCert}, {*keyFile, &opts.ClientKey}} {
		if f.path == "" {
			continue
		}
		if *f.into, err = os.ReadFile(f.path); err != nil {
			return fmt.Errorf("ship: %w", err)
		}
	}
	var witnessErr error
	if *witnessedFile != "" {
		opts.OnWitnessed = func(w *audit.Witnessed) {
			if err := writeReplacing(*witnessedFile, append(bytes.Clone(w.Line()), '\n')); err != nil && witnessErr == nil {
				witnessErr = err
			}
		}
	}
	shipper, err := audit.NewShipper(*dir, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- shipper.Start(ctx) }()
	if *until {
		tick := time.NewTicker(50 * time.Millisecond)
		for !shipper.Status().CaughtUp && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		tick.Stop()
		cancel()
	}
	if err := <-stopped; err != nil {
		return err
	}
	if witnessErr != nil {
		return fmt.Errorf("ship: --witnessed: %w", witnessErr)
	}
	st := shipper.Status()
	fmt.Fprintf(stdout, "the receiver holds %d entries; %d of %d local entries pending; %d failures\n", st.Delivered, st.Pending, st.Local, st.Failures)
	if *until && !st.CaughtUp {
		return fmt.Errorf("ship: stopped before everything was delivered (last error: %s)", st.LastError)
	}
	return nil
}
