package linstorgate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/linstor"
)

// Gate is the LINSTOR gate's HTTP handler: it authenticates the operator, admits a request
// only as the Allowlist says, checks what the rule's Check says against LINSTOR's and
// Kubernetes' state, forwards what it admitted (rebuilt, never the operator's bytes) with
// LINSTOR's client certificate, and records every refusal and every forwarded change in its
// own audit trail.
type Gate struct {
	// Auth says who a request comes from.
	Auth *Authenticator
	// Upstream is LINSTOR.
	Upstream *Upstream
	// RegisterNodes allows node registration (the KubernetesNode check), which Nodes reads.
	RegisterNodes bool
	Nodes         NodeReader
	// Audit receives a record of every refusal and every forwarded change; nil: only the log.
	Audit audit.Appender
	// Log receives the same, and the gate's failures.
	Log logr.Logger
	// ForwardTimeout bounds one forwarded request (5 minutes when zero: longer than the
	// operator's own limit, which then decides).
	ForwardTimeout time.Duration
	// Now is the clock of the audit records.
	Now func() time.Time

	locks [64]sync.Mutex

	// refusals paces the refusals recorded one by one (refusalRecords), so that a flood of
	// refused requests cannot fill the trail's volume and have its pod evicted with it; those
	// over the pace are counted, and the count recorded with the next refusal recorded.
	refusalsMu sync.Mutex
	refusals   *rate.Limiter
	unrecorded int
}

// refusalRecords is the pace of refusals recorded one by one: 1 a second, 60 at once.
const (
	refusalRecordsPerSecond = 1
	refusalRecordsBurst     = 60
)

// paceRefusal says whether a refusal is recorded one by one, and how many refusals before it
// were not.
func (g *Gate) paceRefusal() (record bool, unrecorded int) {
	g.refusalsMu.Lock()
	defer g.refusalsMu.Unlock()
	if g.refusals == nil {
		g.refusals = rate.NewLimiter(refusalRecordsPerSecond, refusalRecordsBurst)
	}
	if !g.refusals.Allow() {
		g.unrecorded++
		return false, 0
	}
	unrecorded, g.unrecorded = g.unrecorded, 0
	return true, unrecorded
}

// The audit records the gate writes: action Action, to Refused or Forwarded.
const (
	// Action is the action of the gate's records.
	Action = "LINSTORRequest"
	// ToRefused and ToForwarded are where a request went.
	ToRefused   = "Refused"
	ToForwarded = "Forwarded"
)

// maxAnswer bounds what is read of a forwarded change's answer (reads are streamed).
const maxAnswer = 1 << 20

func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	method, path := r.Method, r.URL.EscapedPath()
	user, refusal := g.Auth.Authenticate(ctx, r)
	if refusal != nil {
		g.refused(ctx, w, user, refusal)
		return
	}
	if path == linstor.GateUpstreamPath {
		if method != http.MethodGet || r.URL.RawQuery != "" {
			g.refused(ctx, w, user, refuse(method, path, ReasonOperationNotAllowed, "", "the gate's upstream is read with a plain GET"))
			return
		}
		writeJSON(w, http.StatusOK, g.Upstream.Describe())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		g.refused(ctx, w, user, refuse(method, path, ReasonBodyNotAllowed, "", "the body could not be read whole within %d bytes (%v)", maxBody, err))
		return
	}
	adm, refusal := Admit(method, path, r.URL.RawQuery, body, g.RegisterNodes)
	if refusal != nil {
		g.refused(ctx, w, user, refusal)
		return
	}
	up, err := g.Upstream.clients(ctx)
	if err != nil {
		g.failed(w, method, path, fmt.Errorf("LINSTOR is not reachable through the gate: %w", err))
		return
	}
	switch adm.Rule.Check {
	case StampedNotLastCopy:
		// One deletion of a definition at a time: two concurrent ones could each see the
		// other's replica as the copy that stays.
		unlock := g.lock(adm.Params["resource"])
		defer unlock()
		var absent bool
		refusal, absent, err = checkDelete(ctx, up.lin, method, path, adm.Params["resource"], adm.Params["node"])
		if err == nil && absent {
			writeJSON(w, http.StatusOK, notThere(adm.Params["resource"], adm.Params["node"]))
			return
		}
	case KubernetesNode:
		if g.Nodes == nil {
			refusal = refuse(method, path, ReasonNodeRegistrationOff, "", "the gate cannot read Nodes")
		} else {
			refusal, err = checkNode(ctx, g.Nodes, method, path, adm.Node)
		}
	}
	if err != nil {
		g.failed(w, method, path, fmt.Errorf("checking the request against LINSTOR's state: %w", err))
		return
	}
	if refusal != nil {
		g.refused(ctx, w, user, refusal)
		return
	}
	g.forward(ctx, w, up, adm, method, user)
}

func (g *Gate) forward(ctx context.Context, w http.ResponseWriter, up *upstreamClients, adm *Admitted, method, user string) {
	limit := g.ForwardTimeout
	if limit == 0 {
		limit = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	// The base URL is scheme and host alone; the path's names are escaped already.
	target := up.base.String() + adm.Path
	if q := adm.Query.Encode(); q != "" {
		target += "?" + q
	}
	var body io.Reader
	if adm.Body != nil {
		body = bytes.NewReader(adm.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		g.failed(w, method, adm.Path, err)
		return
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodewright-linstor-gate")
	if adm.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := up.http.Do(req)
	change := method != http.MethodGet
	if err != nil {
		if change {
			g.record(ctx, user, ToForwarded, "NoAnswer", fmt.Sprintf("%s %s: no answer from LINSTOR: %v", method, adm.Path, err), adm, 0)
		}
		g.failed(w, method, adm.Path, fmt.Errorf("LINSTOR did not answer: %w", err))
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	if !change {
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	g.record(ctx, user, ToForwarded, http.StatusText(resp.StatusCode), fmt.Sprintf("%s %s: LINSTOR answered %d", method, adm.Path, resp.StatusCode), adm, resp.StatusCode)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// refused answers a refusal and records it.
func (g *Gate) refused(ctx context.Context, w http.ResponseWriter, user string, r *Refusal) {
	details := []audit.Detail{{Name: "method", Value: r.Method}, {Name: "path", Value: r.Path}, {Name: "rule", Value: r.Rule}}
	if r.Property != "" {
		details = append(details, audit.Detail{Name: "property", Value: r.Property})
	}
	g.Log.Info("Refused a LINSTOR request", "user", user, "method", r.Method, "path", r.Path, "rule", r.Rule, "property", r.Property, "message", r.Message)
	if record, unrecorded := g.paceRefusal(); record {
		if unrecorded > 0 {
			details = append(details, audit.Detail{Name: "unrecorded", Value: fmt.Sprintf("%d refusals before this one, over the pace of %d a second (each in the gate's log)",
				unrecorded, refusalRecordsPerSecond)})
		}
		g.append(ctx, user, ToRefused, r.Rule, r.Message, r.Method+" "+r.Path, details)
	}
	writeJSON(w, r.Status, r)
}

// record records a forwarded change.
func (g *Gate) record(ctx context.Context, user, to, reason, message string, adm *Admitted, status int) {
	details := []audit.Detail{{Name: "method", Value: adm.Rule.Method}, {Name: "path", Value: adm.Path}, {Name: "status", Value: fmt.Sprint(status)}}
	if adm.Body != nil {
		details = append(details, audit.Detail{Name: "body", Value: string(adm.Body)})
	}
	g.Log.V(1).Info("Forwarded a change to LINSTOR", "user", user, "method", adm.Rule.Method, "path", adm.Path, "status", status)
	g.append(ctx, user, to, reason, message, adm.Rule.Method+" "+adm.Path, details)
}

// maxDetail and maxMessage bound what a record quotes of a request.
const (
	maxDetail  = 2048
	maxMessage = 4096
)

func (g *Gate) append(ctx context.Context, user, to, reason, message, subject string, details []audit.Detail) {
	if g.Audit == nil {
		return
	}
	if user == "" {
		user = "unauthenticated"
	}
	for i := range details {
		details[i].Value = audit.Shorten(details[i].Value, maxDetail)
	}
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	s := audit.Subject{APIVersion: "linstor.linbit.com/v1", Kind: Action, Name: audit.Shorten(subject, maxDetail), UID: types.UID(requestID())}
	rec := audit.Transition(s, audit.Shorten(user, maxDetail), Action, "", to, reason, audit.Shorten(message, maxMessage), "", now(), details...)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := g.Audit.Append(ctx, rec); err != nil {
		g.Log.Error(err, "Recording a LINSTOR request in the gate's audit trail failed", "subject", subject, "to", to)
	}
}

// failed answers a failure of the gate or of LINSTOR (502), as LINSTOR's ApiCallRc.
func (g *Gate) failed(w http.ResponseWriter, method, path string, err error) {
	g.Log.Error(err, "A LINSTOR request failed at the gate", "method", method, "path", path)
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	writeJSON(w, status, map[string]any{"message": fmt.Sprintf("nodewright-linstor-gate: %s %s: %v", method, path, err)})
}

func (g *Gate) lock(def string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.ToLower(def)))
	m := &g.locks[h.Sum32()%uint32(len(g.locks))]
	m.Lock()
	return m.Unlock
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"message":"nodewright-linstor-gate: the answer does not encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
