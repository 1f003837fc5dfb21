package audit

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Shipper defaults.
const (
	DefaultShipRequestTimeout = 30 * time.Second
	DefaultShipBatchEntries   = 1000
	DefaultShipBatchBytes     = 1 << 20
	DefaultShipPollInterval   = 250 * time.Millisecond
	DefaultShipMinBackoff     = 500 * time.Millisecond
	DefaultShipMaxBackoff     = time.Minute
	DefaultShipCursorInterval = time.Second
)

// ShipperOptions configure a Shipper; zero values take the defaults.
type ShipperOptions struct {
	// URL is the receiver's endpoint, https://... (http:// only without a token).
	URL string
	// Name tells apart the cursor and the metrics of shippers of one directory to different
	// receivers (default "http"): lowercase letters, digits and '-'.
	Name string
	// CA is a PEM bundle of the certificates trusted to sign the receiver's (default: the
	// system's roots).
	CA []byte
	// ClientCert and ClientKey, PEM, are presented to a receiver that asks for a client
	// certificate.
	ClientCert, ClientKey []byte
	// BearerToken, when set, is sent as "Authorization: Bearer <token>".
	BearerToken string
	// RequestTimeout bounds one request, its answer included (default 30s).
	RequestTimeout time.Duration
	// MaxBatchEntries and MaxBatchBytes bound one POST (defaults 1000 and 1 MiB); a line longer
	// than MaxBatchBytes is still sent, alone. A line over MaxLineBytes is never sent, whatever
	// MaxBatchBytes: it is reported (Status().LastError).
	MaxBatchEntries int
	MaxBatchBytes   int
	// PollInterval is how often the files are looked at for new lines once everything is
	// delivered (default 250ms); Wake cuts the wait short.
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failure: it doubles from MinBackoff with
	// each failure in a row, up to MaxBackoff, with jitter (defaults 500ms and 1m).
	MinBackoff, MaxBackoff time.Duration
	// CursorInterval is the least time between two saves of the cursor (default 1s).
	CursorInterval time.Duration
	// Logger receives failures and recoveries (default: none).
	Logger logr.Logger
	// OnWitnessed, when set, is given each new witnessed checkpoint a receiver that is a
	// witness hands back (ReceiverOptions.Witness), its form checked but not its signatures:
	// the operator publishes it for the fleet hub and for verification. It is called from the
	// shipping goroutine and must not block for long.
	OnWitnessed func(*Witnessed)
}

// ShipperStatus is what a Shipper knows of its progress.
type ShipperStatus struct {
	// Delivered is how many entries the receiver holds, as it last said.
	Delivered uint64
	// Local is how many entries the local files held when last looked at.
	Local uint64
	// Pending is how many local entries the receiver does not hold yet, as of Local.
	Pending uint64
	// CaughtUp is true when the shipper last looked and found nothing more to send: the
	// receiver held every entry the files had then.
	CaughtUp bool
	// Failures counts failed exchanges and local read errors since the shipper was made;
	// ConsecutiveFailures those since the last success.
	Failures            uint64
	ConsecutiveFailures int
	LastError           string
	LastErrorTime       time.Time
	LastSuccess         time.Time
}

// Shipper delivers the chain a Log writes to a FileSink directory to a Receiver over HTTP(S),
// in order, each entry once. It runs beside the log and shares nothing with it but the files,
// which it only reads: an endpoint that is down, slow or failing never holds up an Append; the
// files, which the log keeps durably anyway, are the queue of what is still to be sent.
//
// Where to resume is the receiver's to say (docs/audit.md, "Shipping to an HTTP endpoint"):
// after any failure the shipper asks for the receiver's head before sending again, so a batch
// stored but not acknowledged is not sent twice, and nothing is skipped.
type Shipper struct {
	dir        string
	opts       ShipperOptions
	client     *http.Client
	cursorPath string
	wake       chan struct{}
	running    atomic.Bool
	metrics    shipperMetrics

	// Owned by the goroutine running Start.
	reader     chainReader
	pos        shipPosition // the receiver holds every entry before pos.next
	hasPos     bool
	agreed     bool // pos is what the receiver last said; false after any doubt
	batchBytes int
	saved      shipPosition
	savedAt    time.Time
	localAt    time.Time
	witnessed  []byte // the line of the last witnessed checkpoint handed to OnWitnessed

	mu     sync.Mutex
	status ShipperStatus
}

var shipperName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// NewShipper ships the chain in dir (a FileSink directory) as opts says. Run it with Start.
func NewShipper(dir string, opts ShipperOptions) (*Shipper, error) {
	if opts.Name == "" {
		opts.Name = "http"
	}
	if !shipperName.MatchString(opts.Name) {
		return nil, fmt.Errorf("audit shipper name %q: lowercase letters, digits and '-' only", opts.Name)
	}
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("audit shipper: %q is not an http(s) URL", opts.URL)
	}
	if u.Scheme == "http" && opts.BearerToken != "" {
		return nil, errors.New("audit shipper: a bearer token is never sent over plain http")
	}
	tlsConfig, err := shipperTLS(opts)
	if err != nil {
		return nil, err
	}
	setDefault(&opts.RequestTimeout, DefaultShipRequestTimeout)
	setDefault(&opts.MaxBatchEntries, DefaultShipBatchEntries)
	setDefault(&opts.MaxBatchBytes, DefaultShipBatchBytes)
	setDefault(&opts.PollInterval, DefaultShipPollInterval)
	setDefault(&opts.MinBackoff, DefaultShipMinBackoff)
	setDefault(&opts.MaxBackoff, DefaultShipMaxBackoff)
	setDefault(&opts.CursorInterval, DefaultShipCursorInterval)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	return &Shipper{
		dir:  dir,
		opts: opts,
		client: &http.Client{
			Transport: transport,
			// A redirect would send the batch somewhere the protocol did not agree on.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		cursorPath: cursorFile(dir, opts.Name),
		wake:       make(chan struct{}, 1),
		metrics:    newShipperMetrics(opts.Name),
		reader:     chainReader{dir: dir},
		batchBytes: opts.MaxBatchBytes,
	}, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func shipperTLS(opts ShipperOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(opts.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(opts.CA) {
			return nil, errors.New("audit shipper: no PEM certificate in the CA bundle")
		}
		cfg.RootCAs = pool
	}
	if len(opts.ClientCert) > 0 || len(opts.ClientKey) > 0 {
		cert, err := tls.X509KeyPair(opts.ClientCert, opts.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("audit shipper: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Wake asks a shipper waiting for new lines to look now, as after an Append. It never blocks.
func (s *Shipper) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Status is a snapshot of the shipper's progress.
func (s *Shipper) Status() ShipperStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Start ships until ctx ends, then saves the cursor and returns nil; failures are retried,
// with backoff, for as long as it runs, and reported in Status, the metrics and the log.
// It is a controller-runtime manager.Runnable.
func (s *Shipper) Start(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("audit shipper: already running")
	}
	defer s.running.Store(false)
	defer s.reader.close()
	s.agreed = false // whatever was agreed before this run may have changed since
	s.loadCursor()
	defer s.saveCursor(true)
	failures := 0
	for {
		wait, err := s.step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failures++
			s.failed(err, failures)
			wait = backoff(failures, s.opts.MinBackoff, s.opts.MaxBackoff, rand.Float64())
		} else if failures > 0 {
			s.opts.Logger.Info("Audit shipping recovered", "url", s.opts.URL, "failures", failures, "delivered", s.pos.next)
			failures = 0
		}
		if wait > 0 {
			s.sleep(ctx, wait, err == nil)
		}
	}
}

func (s *Shipper) sleep(ctx context.Context, d time.Duration, wakeable bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = s.wake
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
}

// step agrees with the receiver on where it stands if need be, then sends the next batch. It
// returns how long to wait before the next step when everything is delivered.
func (s *Shipper) step(ctx context.Context) (time.Duration, error) {
	if !s.agreed {
		status, head, problem, err := s.exchange(ctx, http.MethodGet, nil, 0)
		if err != nil {
			return 0, err
		}
		if status != http.StatusOK {
			return 0, answerError(status, problem)
		}
		if err := s.resync(head); err != nil {
			return 0, err
		}
	}
	b, err := s.reader.batch(s.pos, s.opts.MaxBatchEntries, s.batchBytes)
	if err != nil {
		return 0, fmt.Errorf("reading the local chain: %w", err)
	}
	if b.entries == 0 {
		s.pos = b.end // perhaps the start of a new file: the same place in the chain
		s.observeLocal(b.end.next)
		s.mu.Lock()
		s.status.CaughtUp = true
		s.mu.Unlock()
		s.saveCursor(false)
		return s.opts.PollInterval, nil
	}
	status, head, problem, err := s.exchange(ctx, http.MethodPost, b.body, b.first)
	switch {
	case err != nil:
		return 0, err
	case status == http.StatusOK && head.Next == b.end.next && head.Head == b.end.prev:
		s.moveTo(b.end)
	case status == http.StatusOK || status == http.StatusConflict:
		// Stored by an earlier send whose answer was lost, or the receiver is elsewhere: its
		// head says where to go on.
		if err := s.resync(head); err != nil {
			return 0, err
		}
	case status == http.StatusRequestEntityTooLarge && b.entries > 1:
		s.batchBytes = max(1, len(b.body)/2)
		s.opts.Logger.Info("Audit receiver refused a batch as too large; sending smaller ones", "url", s.opts.URL, "bytes", len(b.body), "maxBatchBytes", s.batchBytes)
		return 0, nil
	default:
		s.agreed = false
		return 0, answerError(status, problem)
	}
	s.observeLocalEvery()
	s.saveCursor(false)
	return 0, nil
}

func answerError(status int, problem string) error {
	if problem == "" {
		return fmt.Errorf("the audit receiver answered %d %s", status, http.StatusText(status))
	}
	return fmt.Errorf("the audit receiver answered %d %s: %s", status, http.StatusText(status), problem)
}

// exchange makes one request. Any failure leaves the shipper unsure of the receiver's head
// (a request may have been stored whatever came back), so the next step asks for it first.
// For the answers that carry a head (200, 409, 422) the head is returned read and checked.
func (s *Shipper) exchange(ctx context.Context, method string, body []byte, first uint64) (int, ChainHead, string, error) {
	s.agreed = false
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.opts.URL, bytes.NewReader(body))
	if err != nil {
		return 0, ChainHead{}, "", fmt.Errorf("audit shipper: %w", err)
	}
	req.Header.Set("User-Agent", "nodewright-audit-shipper")
	req.Header.Set("Accept", "application/json")
	if method == http.MethodPost {
		req.Header.Set("Content-Type", BatchContentType)
		req.Header.Set(FirstSeqHeader, strconv.FormatUint(first, 10))
	}
	if s.opts.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.opts.BearerToken)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, ChainHead{}, "", fmt.Errorf("%s %s: %w", method, s.opts.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return 0, ChainHead{}, "", fmt.Errorf("%s %s: reading the answer: %w", method, s.opts.URL, err)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusConflict, http.StatusUnprocessableEntity:
		head, problem, err := parseHeadAnswer(answer)
		if err != nil {
			return 0, ChainHead{}, "", fmt.Errorf("%s %s: %d: %w", method, s.opts.URL, resp.StatusCode, err)
		}
		if resp.StatusCode != http.StatusUnprocessableEntity {
			s.agreed = true // provisionally: the caller checks the head against the files
		}
		s.handBack(answer, head)
		return resp.StatusCode, head, problem, nil
	default:
		_, problem, _ := parseHeadAnswer(answer) // a refusal says why in "error", if at all
		return resp.StatusCode, ChainHead{}, problem, nil
	}
}

// handBack gives OnWitnessed the witnessed checkpoint an answer carries, once per checkpoint.
// It is the witness's word whether or not its copy agrees with the local files: a copy that
// forks from them is what the witnessed checkpoint is there to show.
func (s *Shipper) handBack(answer []byte, head ChainHead) {
	if s.opts.OnWitnessed == nil {
		return
	}
	w, err := parseAnswerWitnessed(answer, head)
	if err != nil {
		s.opts.Logger.Info("Ignoring the audit receiver's witnessed checkpoint", "url", s.opts.URL, "err", err.Error())
		return
	}
	if w == nil || bytes.Equal(w.Line(), s.witnessed) {
		return
	}
	s.witnessed = bytes.Clone(w.Line())
	s.opts.OnWitnessed(w)
}

// resync moves to where the receiver's head says its copy ends, after checking that the copy
// is this chain: the local entry before that place must hash to the receiver's head.
func (s *Shipper) resync(h ChainHead) error {
	if s.hasPos && s.pos.next == h.Next && s.pos.prev == h.Head {
		s.moveTo(s.pos) // where it was: nothing to read
		s.agreed = true
		return nil
	}
	s.agreed = false
	start := s.pos
	if !s.hasPos {
		start = shipPosition{}
	}
	pos, err := s.reader.seek(start, h.Next)
	if err != nil {
		return fmt.Errorf("the audit receiver holds %d entries, but the local chain cannot continue from there: %w", h.Next, err)
	}
	if pos.prev != h.Head {
		return fmt.Errorf("the audit receiver's copy is another chain: its entry %d hashes to %s, the local one to %s", int64(h.Next)-1, h.Head, pos.prev)
	}
	s.moveTo(pos)
	s.agreed = true
	return nil
}

// moveTo records that the receiver holds every entry before pos.
func (s *Shipper) moveTo(pos shipPosition) {
	if s.hasPos && pos.next > s.pos.next {
		s.metrics.delivered.Add(float64(pos.next - s.pos.next))
	}
	now := time.Now()
	moved := !s.hasPos || pos.next != s.pos.next
	s.pos, s.hasPos = pos, true
	s.mu.Lock()
	if moved {
		s.status.CaughtUp = false
	}
	s.status.Delivered = pos.next
	s.status.ConsecutiveFailures = 0
	s.status.LastSuccess = now
	s.status.Local = max(s.status.Local, pos.next)
	s.status.Pending = s.status.Local - pos.next
	pending := s.status.Pending
	s.mu.Unlock()
	s.metrics.receiver.Set(float64(pos.next))
	s.metrics.pending.Set(float64(pending))
	s.metrics.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
}

// observeLocal records how many entries the local files hold.
func (s *Shipper) observeLocal(local uint64) {
	s.localAt = time.Now()
	s.mu.Lock()
	s.status.Local = local
	if s.hasPos {
		s.status.Pending = local - min(local, s.status.Delivered)
	} else {
		s.status.Pending = local
	}
	pending := s.status.Pending
	s.mu.Unlock()
	s.metrics.pending.Set(float64(pending))
}

// observeLocalEvery reads the end of the local chain at most once per poll interval: while
// behind, the batches alone do not say how far behind.
func (s *Shipper) observeLocalEvery() {
	if time.Since(s.localAt) < s.opts.PollInterval {
		return
	}
	if local, err := s.reader.localNext(); err == nil {
		s.observeLocal(local)
	}
}

func (s *Shipper) failed(err error, consecutive int) {
	s.agreed = false
	s.observeLocalEvery()
	s.mu.Lock()
	s.status.CaughtUp = false
	s.status.Failures++
	s.status.ConsecutiveFailures = consecutive
	s.status.LastError = err.Error()
	s.status.LastErrorTime = time.Now()
	pending := s.status.Pending
	s.mu.Unlock()
	s.metrics.failures.Inc()
	log := s.opts.Logger
	if consecutive > 1 {
		log = log.V(1) // the first failure says it; the rest are in the metrics
	}
	log.Info("Audit shipping failed; the entries wait in the local files", "url", s.opts.URL, "err", err.Error(), "pending", pending, "failures", consecutive)
}

// loadCursor takes the saved cursor as a first guess of where the receiver stands, if it still
// points at the entry it names; the first answer from the receiver confirms it or not.
func (s *Shipper) loadCursor() {
	pos, ok, err := loadCursor(s.cursorPath, s.opts.URL)
	if err != nil {
		s.opts.Logger.Info("Ignoring the audit ship cursor", "err", err.Error())
	}
	if ok && s.reader.holds(pos) {
		s.pos, s.hasPos, s.saved = pos, true, pos
		s.savedAt = time.Now()
	}
}

// saveCursor keeps the agreed position, at most once per CursorInterval unless forced.
func (s *Shipper) saveCursor(force bool) {
	if !s.hasPos || s.pos == s.saved || (!force && time.Since(s.savedAt) < s.opts.CursorInterval) {
		return
	}
	s.savedAt = time.Now()
	if err := saveCursor(s.cursorPath, s.opts.URL, s.pos); err != nil {
		s.opts.Logger.Info("Could not save the audit ship cursor; a restart reads further back", "err", err.Error())
		return
	}
	s.saved = s.pos
}

// backoff is the wait after the n-th failure in a row (n ≥ 1): lo doubled n-1 times, at most
// hi, then drawn from its upper half with u (uniform in [0, 1)), so that shippers that failed
// together do not all come back at once.
func backoff(n int, lo, hi time.Duration, u float64) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		if d > hi/2 {
			d = hi
			break
		}
		d *= 2
	}
	d = min(d, hi)
	return d/2 + time.Duration(u*float64(d-d/2))
}
