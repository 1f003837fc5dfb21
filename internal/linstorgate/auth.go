package linstorgate

import (
	"context"
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// DefaultAudience is the audience of the operator's tokens for the gate: the chart projects
// a ServiceAccount token with it into the operator's pod, and the gate accepts no other.
const DefaultAudience = "nodewright-linstor-gate"

// podNameExtra is the extra the API server gives a token bound to a pod.
const podNameExtra = "authentication.kubernetes.io/pod-name"

// Authenticator accepts a request carrying a ServiceAccount token of the operator, for the
// gate's audience and bound to a pod, as a TokenReview on the API server says.
type Authenticator struct {
	// Reviews creates the TokenReviews.
	Reviews authv1client.TokenReviewInterface
	// Audience is the audience the token must be for.
	Audience string
	// User is the one user the gate serves: the operator's ServiceAccount,
	// system:serviceaccount:<namespace>:<name>.
	User string
	// CacheFor is how long a review's answer is used again for the same token (10 s when
	// zero): the upgrade makes many requests, each would otherwise be a TokenReview.
	CacheFor time.Duration
	// Now is the clock of the cache.
	Now func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]review
}

type review struct {
	user    string
	refusal *Refusal
	until   time.Time
}

// maxCached bounds the cache: a flood of tokens cannot make the gate hold more.
const maxCached = 256

// Authenticate returns the user a request comes from, or why it is refused: 401 without the
// operator's valid token for the gate's audience, 403 for another identity.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (string, *Refusal) {
	method, path := r.Method, r.URL.EscapedPath()
	auth := r.Header.Values("Authorization")
	if len(auth) != 1 || !strings.HasPrefix(auth[0], "Bearer ") || strings.TrimSpace(auth[0][len("Bearer "):]) == "" {
		return "", unauthenticated(method, path, "no bearer token: the gate serves only the operator, with its ServiceAccount token for audience %q", a.Audience)
	}
	token := strings.TrimSpace(auth[0][len("Bearer "):])
	key := sha256.Sum256([]byte(token))
	now := a.now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.until) {
		a.mu.Unlock()
		return c.user, c.refusal.at(method, path)
	}
	a.mu.Unlock()

	tr, err := a.Reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		// Not cached: the API server may answer the next one.
		r := unauthenticated(method, path, "the token could not be reviewed: %v", err)
		return "", r
	}
	user, refusal := a.judge(method, path, tr.Status)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache == nil || len(a.cache) >= maxCached {
		a.cache = map[[sha256.Size]byte]review{}
	}
	a.cache[key] = review{user: user, refusal: refusal, until: now.Add(a.cacheFor())}
	return user, refusal
}

// judge decides on a TokenReview's answer.
func (a *Authenticator) judge(method, path string, st authenticationv1.TokenReviewStatus) (string, *Refusal) {
	switch {
	case !st.Authenticated:
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return "", unauthenticated(method, path, "the token is not valid for audience %q: %s", a.Audience, why)
	case !slices.Contains(st.Audiences, a.Audience):
		return "", unauthenticated(method, path, "the token is not for audience %q (it is for %q)", a.Audience, st.Audiences)
	case st.User.Username != a.User:
		r := refuse(method, path, ReasonNotTheOperator, "", "%s is not the operator's ServiceAccount (%s): the gate serves no one else", st.User.Username, a.User)
		return st.User.Username, r
	case len(st.User.Extra[podNameExtra]) == 0:
		r := refuse(method, path, ReasonNotTheOperator, "", "the token of %s is not bound to a pod: the gate takes only the token the kubelet projects into the operator's pod", st.User.Username)
		return st.User.Username, r
	}
	return st.User.Username, nil
}

func unauthenticated(method, path, format string, args ...any) *Refusal {
	r := refuse(method, path, ReasonUnauthenticated, "", format, args...)
	r.Status = http.StatusUnauthorized
	return r
}

// at is the refusal for another request with the same token.
func (r *Refusal) at(method, path string) *Refusal {
	if r == nil {
		return nil
	}
	out := *r
	out.Message = strings.Replace(out.Message, out.Method+" "+out.Path, method+" "+path, 1)
	out.Method, out.Path = method, path
	return &out
}

func (a *Authenticator) cacheFor() time.Duration {
	if a.CacheFor > 0 {
		return a.CacheFor
	}
	return 10 * time.Second
}

func (a *Authenticator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}
