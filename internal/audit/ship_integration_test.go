package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The faults the test receiver plays, in turn, among batches it takes well.
const (
	faultNone           = "none"
	faultDrop           = "connection closed before storing"
	faultDropAfterStore = "connection closed after storing"
	fault500            = "500 before storing"
	fault503AfterStore  = "503 after storing"
	faultSlowAfterStore = "stored, answered after the client gave up"
	faultSlowThenStore  = "stored after the client gave up"
	faultGetDrop        = "head asked, connection closed"
	faultGet503         = "head asked, 503"
)

var postFaults = []string{faultNone, faultDrop, faultNone, faultNone, faultDropAfterStore, faultNone, fault500,
	faultNone, faultNone, fault503AfterStore, faultNone, faultSlowAfterStore, faultNone, faultNone, faultDrop,
	faultNone, faultSlowThenStore, faultNone, faultNone, faultNone}

// faultyReceiver is a Receiver behind a server that misbehaves on purpose.
type faultyReceiver struct {
	recv    atomic.Pointer[Receiver]
	delay   time.Duration // past the client's timeout
	faulty  atomic.Bool
	posts   atomic.Int64
	gets    atomic.Int64
	blocked atomic.Pointer[chan struct{}] // when set, requests wait until it is closed
	entered chan struct{}                 // told when a request starts waiting

	mu   sync.Mutex
	seen map[string]int // faults played where they matter: the after-store ones only on a stored batch
}

func (f *faultyReceiver) played(fault string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[fault]++
}

func (f *faultyReceiver) playedAll(times int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fault := range []string{faultDrop, faultDropAfterStore, fault500, fault503AfterStore, faultSlowAfterStore,
		faultSlowThenStore, faultGetDrop, faultGet503} {
		if f.seen[fault] < times {
			return false
		}
	}
	return true
}

func (f *faultyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ch := f.blocked.Load(); ch != nil {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		<-*ch
	}
	recv := f.recv.Load()
	fault := faultNone
	switch {
	case !f.faulty.Load():
	case r.Method == http.MethodPost:
		fault = postFaults[f.posts.Add(1)%int64(len(postFaults))]
	case f.gets.Add(1)%5 == 0:
		fault = faultGetDrop
	case f.gets.Load()%7 == 0:
		fault = faultGet503
	}
	switch fault {
	case faultNone:
		recv.ServeHTTP(w, r)
	case faultDrop, faultGetDrop:
		f.played(fault)
		hangUp(w)
	case fault500, faultGet503:
		f.played(fault)
		http.Error(w, "failing on purpose", map[string]int{fault500: http.StatusInternalServerError, faultGet503: http.StatusServiceUnavailable}[fault])
	case faultDropAfterStore, fault503AfterStore, faultSlowAfterStore:
		// The nasty case: the batch is stored, the shipper is told otherwise or nothing.
		rec := httptest.NewRecorder()
		recv.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK {
			f.played(fault)
		}
		switch fault {
		case faultDropAfterStore:
			hangUp(w)
		case fault503AfterStore:
			http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
		default:
			time.Sleep(f.delay)
			copyAnswer(w, rec)
		}
	case faultSlowThenStore:
		// Stored after the shipper gave up, racing with what it does next.
		f.played(fault)
		time.Sleep(f.delay)
		recv.ServeHTTP(httptest.NewRecorder(), r)
	}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err) // HTTP/1.1 always hijacks
	}
	_ = conn.Close()
}

// serveTLS starts a TLS server on addr (":0" style the first time, the same address later).
func serveTLS(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the address was just freed; another process may briefly hold it
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	return srv
}

// The test: a log appends thousands of records concurrently while the shipper ships
// them over TLS to a receiver that drops connections, answers late, fails before and after
// storing, blocks, and is down for a while (restarting from its directory); the shipper itself
// is restarted halfway. Once the faults stop, the receiver's copy is the local chain, byte for
// byte: it verifies, with no gap and no duplicate, and has the same head.
func TestShippingSurvivesAFaultyReceiver(t *testing.T) {
	writers, perWriter := 8, 300
	if testing.Short() {
		perWriter = 120
	}
	signer := testSigner(t)
	pub := signer.PublicKey()
	local, remote := t.TempDir(), t.TempDir()

	sink, err := OpenFileSink(local, FileSinkOptions{MaxFileBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	log := NewLog(sink, signer, sink.State(), LogOptions{CheckpointEvery: 100, CheckpointInterval: 50 * time.Millisecond})
	logClosed := false
	defer func() {
		if !logClosed {
			_ = log.Close()
		}
	}()
	recvOpts := ReceiverOptions{MaxFileBytes: 192 << 10, PublicKeys: []ed25519.PublicKey{pub}}
	recv, err := OpenReceiver(remote, recvOpts)
	if err != nil {
		t.Fatal(err)
	}
	faulty := &faultyReceiver{delay: 500 * time.Millisecond, entered: make(chan struct{}, 1), seen: map[string]int{}}
	faulty.recv.Store(recv)
	faulty.faulty.Store(true)
	srv := serveTLS(t, "127.0.0.1:0", faulty)
	defer func() { srv.Close() }()
	addr := srv.Listener.Addr().String()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	opts := ShipperOptions{URL: srv.URL + "/audit", Name: "itest", CA: ca, RequestTimeout: 400 * time.Millisecond,
		MaxBatchEntries: 100, MaxBatchBytes: 128 << 10, PollInterval: 10 * time.Millisecond,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	deliveredBefore := metricValue(t, shipDelivered.WithLabelValues("itest"))
	failuresBefore := metricValue(t, shipFailures.WithLabelValues("itest"))
	_, stop := startShipper(t, local, opts)

	// appendAll appends n records from each writer, with a checkpoint asked for now and then,
	// and returns the slowest Append.
	seq := 0
	appendAll := func(n int) time.Duration {
		t.Helper()
		base := seq
		seq += writers * n
		var wg sync.WaitGroup
		var slowest atomic.Int64
		for w := range writers {
			wg.Go(func() {
				for i := range n {
					start := time.Now()
					if _, err := log.Append(context.Background(), testRecord(base+w*n+i)); err != nil {
						t.Error(err)
						return
					}
					took := int64(time.Since(start))
					for old := slowest.Load(); took > old && !slowest.CompareAndSwap(old, took); old = slowest.Load() {
					}
					if i%97 == 0 {
						if _, err := log.Checkpoint(context.Background()); err != nil {
							t.Error(err)
						}
					}
				}
			})
		}
		wg.Wait()
		return time.Duration(slowest.Load())
	}

	appendAll(perWriter / 2)
	eventually(t, 2*time.Minute, "some entries delivered through the faults", func() bool { return recv.Head().Next > 0 })

	// The shipper restarted halfway: a new one on the same directory.
	stop()
	shipper, stop := startShipper(t, local, opts)
	appendAll(perWriter / 2)

	// The receiver holds the shipper's request and answers nothing; appends go on regardless.
	// They finish before the request is let go, so none of them waited for it.
	release := make(chan struct{})
	faulty.blocked.Store(&release)
	select {
	case <-faulty.entered:
	case <-time.After(2 * time.Minute):
		t.Fatal("the shipper sent nothing to the blocked receiver")
	}
	slowest := appendAll(perWriter / 4)
	t.Logf("while the receiver hung, the slowest Append took %v", slowest)
	faulty.blocked.Store(nil)
	close(release)

	// The receiver down: server gone, its process restarted from its directory.
	srv.Close()
	if err := recv.Close(); err != nil {
		t.Fatal(err)
	}
	failed := shipper.Status().Failures
	appendAll(perWriter / 4)
	eventually(t, 2*time.Minute, "the shipper notices the receiver is down", func() bool { return shipper.Status().Failures >= failed+3 })
	if st := shipper.Status(); st.Pending == 0 || st.LastError == "" {
		t.Errorf("down, yet the status says %+v", st)
	}
	if recv, err = OpenReceiver(remote, recvOpts); err != nil {
		t.Fatal(err)
	}
	faulty.recv.Store(recv)
	srv = serveTLS(t, addr, faulty)
	appendAll(perWriter / 4)
	// Until every fault has struck twice where it hurts, a few more records at a time.
	eventually(t, 3*time.Minute, "every fault played twice", func() bool { return faulty.playedAll(2) }, func() { appendAll(2) })

	// The faults stop; a clean close ends the chain with a checkpoint.
	faulty.faulty.Store(false)
	logClosed = true
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	localReport := verifyDir(t, local)
	if !localReport.OK || localReport.Records != uint64(seq) {
		t.Fatalf("the local chain: %+v", localReport)
	}
	eventually(t, 3*time.Minute, "the receiver catches up, and the shipper knows", func() bool {
		st := shipper.Status()
		return recv.Head().Next == localReport.Entries && st.Delivered == localReport.Entries && st.CaughtUp
	})
	stop()

	files, _ := ChainFiles(remote)
	report, err := VerifyFiles(VerifyOptions{PublicKeys: []ed25519.PublicKey{pub}}, files...)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK || report.Entries != localReport.Entries || report.Records != localReport.Records || report.FirstSeq != 0 ||
		report.LastSeq != localReport.Entries-1 || report.Unsigned != 0 {
		t.Fatalf("the copy: %+v\nthe local chain: %+v", report, localReport)
	}
	localLines := dirLines(t, local)
	if head := recv.Head().Head; head != lineHash(t, localLines[len(localLines)-1]) {
		t.Fatalf("the copy's head %s differs from the local one", head)
	}
	if !bytes.Equal(join(dirLines(t, remote)), join(localLines)) {
		t.Fatal("the copy differs from the local chain")
	}
	t.Logf("%d entries (%d records) in %d local and %d remote files; faults played: %v", report.Entries, report.Records,
		len(localReport.Files), len(files), faulty.seen)
	if st := shipper.Status(); st.Delivered != report.Entries || st.Pending != 0 || st.Local != report.Entries || !st.CaughtUp {
		t.Errorf("status %+v", st)
	}
	if got := metricValue(t, shipPending.WithLabelValues("itest")); got != 0 {
		t.Errorf("pending entries metric %v", got)
	}
	// Each entry counted once, across the two shippers, whichever of them learnt of it.
	if got := metricValue(t, shipDelivered.WithLabelValues("itest")) - deliveredBefore; got != float64(report.Entries) {
		t.Errorf("delivered entries metric went up by %v, for %d entries", got, report.Entries)
	}
	if got := metricValue(t, shipFailures.WithLabelValues("itest")) - failuresBefore; got < float64(shipper.Status().Failures) {
		t.Errorf("failures metric went up by %v, the last shipper alone saw %d", got, shipper.Status().Failures)
	}
	_ = recv.Close()
}

func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.Gauge.GetValue()
	}
	return out.Counter.GetValue()
}
