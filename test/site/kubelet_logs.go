package site

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// Container logs are kept in the CRI format (timestamp, stream, P for a partial line or F for
// a full one, content) and served at the kubelet's /containerLogs path, over TLS, for the API
// server's pods/log to proxy to.

// criLog writes the lines of a container's streams into one log file.
type criLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *criLog) stream(name string) *criStream { return &criStream{log: l, name: name} }

func (l *criLog) line(stream, tag string, content []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A failed write loses a log line, never the container: the runtime does the same.
	_, _ = fmt.Fprintf(l.w, "%s %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), stream, tag, content)
}

// criStream is one stream of a container: stdout or stderr.
type criStream struct {
	log  *criLog
	name string
	buf  []byte
}

func (s *criStream) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.log.line(s.name, "F", s.buf[:i])
		s.buf = s.buf[i+1:]
	}
	return len(p), nil
}

// flush writes a last line that has no newline, as a partial one.
func (s *criStream) flush() {
	if len(s.buf) > 0 {
		s.log.line(s.name, "P", s.buf)
		s.buf = nil
	}
}

// logRecord is one line of a CRI log file.
type logRecord struct {
	time    time.Time
	stamp   string
	partial bool
	content []byte
}

func parseRecord(line []byte) (logRecord, bool) {
	parts := bytes.SplitN(line, []byte(" "), 4)
	if len(parts) != 4 {
		return logRecord{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(parts[0]))
	if err != nil {
		return logRecord{}, false
	}
	return logRecord{time: t, stamp: string(parts[0]), partial: string(parts[2]) == "P", content: parts[3]}, true
}

// logQuery is the kubelet's container log options.
type logQuery struct {
	tailLines  int64 // < 0: all
	limitBytes int64 // <= 0: no limit
	follow     bool
	timestamps bool
	since      time.Time
}

func parseLogQuery(r *http.Request) (logQuery, error) {
	q := logQuery{tailLines: -1}
	v := r.URL.Query()
	var err error
	if s := v.Get("tailLines"); s != "" {
		if q.tailLines, err = strconv.ParseInt(s, 10, 64); err != nil {
			return q, fmt.Errorf("tailLines: %w", err)
		}
	}
	if s := v.Get("limitBytes"); s != "" {
		if q.limitBytes, err = strconv.ParseInt(s, 10, 64); err != nil {
			return q, fmt.Errorf("limitBytes: %w", err)
		}
	}
	q.follow = v.Get("follow") == "true"
	q.timestamps = v.Get("timestamps") == "true"
	if s := v.Get("sinceSeconds"); s != "" {
		secs, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("sinceSeconds: %w", err)
		}
		q.since = time.Now().Add(-time.Duration(secs) * time.Second)
	}
	if s := v.Get("sinceTime"); s != "" {
		if q.since, err = time.Parse(time.RFC3339, s); err != nil {
			return q, fmt.Errorf("sinceTime: %w", err)
		}
	}
	return q, nil
}

// logWriter renders records for the client, up to limitBytes.
type logWriter struct {
	w          io.Writer
	timestamps bool
	left       int64 // bytes the client still takes; < 0 without a limit
}

// errLimitReached ends a log response at limitBytes.
var errLimitReached = errors.New("limitBytes reached")

func (lw *logWriter) write(rec logRecord) error {
	var b []byte
	if lw.timestamps {
		b = append(b, rec.stamp...)
		b = append(b, ' ')
	}
	b = append(b, rec.content...)
	if !rec.partial {
		b = append(b, '\n')
	}
	if lw.left >= 0 && int64(len(b)) >= lw.left {
		_, err := lw.w.Write(b[:lw.left])
		lw.left = 0
		return errors.Join(errLimitReached, err)
	}
	if lw.left >= 0 {
		lw.left -= int64(len(b))
	}
	_, err := lw.w.Write(b)
	return err
}

// readRecords reads the complete lines of r from its current offset; the bytes of a line
// still being written are left for the next read.
func readRecords(r *bufio.Reader, pending *[]byte) []logRecord {
	var out []logRecord
	for {
		chunk, err := r.ReadBytes('\n')
		*pending = append(*pending, chunk...)
		if err != nil {
			return out
		}
		if rec, ok := parseRecord(bytes.TrimSuffix(*pending, []byte("\n"))); ok {
			out = append(out, rec)
		}
		*pending = nil
	}
}

// tail keeps the records of the last n lines (a line may be several partial records).
func tail(records []logRecord, n int64) []logRecord {
	if n < 0 {
		return records
	}
	i := len(records)
	for lines := int64(0); i > 0; i-- {
		if !records[i-1].partial || i == len(records) {
			if lines == n {
				break
			}
			lines++
		}
	}
	return records[i:]
}

// tailOfLog renders the last lines of a log file, at most maxBytes, for a termination message.
func tailOfLog(path string, lines int64, maxBytes int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	var pending []byte
	var buf bytes.Buffer
	lw := &logWriter{w: &buf, left: -1}
	for _, rec := range tail(readRecords(bufio.NewReader(f), &pending), lines) {
		_ = lw.write(rec) // a bytes.Buffer does not fail
	}
	out := buf.Bytes()
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return string(out)
}

// logServer is the kubelet's HTTPS endpoint.
type logServer struct {
	srv  *http.Server
	port int
}

func (l *logServer) close() { _ = l.srv.Close() }

// serve starts the kubelet's HTTPS endpoint on a free loopback port, with a self-signed
// certificate: the API server does not check a kubelet's certificate when it has no
// --kubelet-certificate-authority.
func (k *kubelet) serve() (*logServer, error) {
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(siteIP, "0"), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("site: the kubelet's listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.serveLogs)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }() // returns when closed
	return &logServer{srv: srv, port: ln.Addr().(*net.TCPAddr).Port}, nil
}

func (k *kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, containerName := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	q, err := parseLogQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod := &corev1.Pod{}
	if err := k.s.mgr.GetAPIReader().Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil || pod.Spec.NodeName != k.s.opts.NodeName {
		if err == nil || apierrors.IsNotFound(err) {
			http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, name, k.s.opts.NodeName), http.StatusNotFound)
		} else {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		return
	}
	if r.URL.Query().Get("previous") == "true" {
		http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", containerName, name), http.StatusBadRequest)
		return
	}
	f, err := os.Open(filepath.Join(k.s.files.pod(string(pod.UID)), containerName+".log"))
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", containerName, name), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = f.Close() }()
	w.Header().Set("Content-Type", "text/plain")
	k.streamLog(r.Context(), w, f, pod.UID, q)
}

// followPoll is how often a followed log is looked at for new lines.
const followPoll = 100 * time.Millisecond

func (k *kubelet) streamLog(ctx context.Context, w http.ResponseWriter, f *os.File, uid types.UID, q logQuery) {
	lw := &logWriter{w: w, timestamps: q.timestamps, left: -1}
	if q.limitBytes > 0 {
		lw.left = q.limitBytes
	}
	reader := bufio.NewReader(f)
	var pending []byte
	emit := func(records []logRecord) bool {
		for _, rec := range records {
			if rec.time.Before(q.since) {
				continue
			}
			if err := lw.write(rec); err != nil {
				return false
			}
		}
		if flusher, ok := w.(http.Flusher); ok {
			flusher.Flush()
		}
		return true
	}
	if !emit(tail(readRecords(reader, &pending), q.tailLines)) || !q.follow {
		return
	}
	ticker := time.NewTicker(followPoll)
	defer ticker.Stop()
	for {
		running := k.running(uid) // looked at before reading, so the last lines are not missed
		if !emit(readRecords(reader, &pending)) || !running {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// selfSigned makes a certificate for the loopback address.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "nodewright-site-kubelet"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP(siteIP)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
