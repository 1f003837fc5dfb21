package kubelite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// token is a token of the ServiceAccount sa, bound to the Secret bound when it is set (and so
// refused once the Secret is deleted).
func token(t *testing.T, ns, sa string, bound *corev1.Secret) string {
	t.Helper()
	ctx := context.Background()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}
	if err := env.Client.Create(ctx, account); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if bound != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
	}
	if err := env.Client.SubResource("token").Create(ctx, account, req); err != nil {
		t.Fatal(err)
	}
	return req.Status.Token
}

// writeAtomically replaces path's content as the kubelet updates a projected token: a new
// file renamed over the old.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// whoAmI asks the API server who the client is (a SelfSubjectReview).
func whoAmI(t *testing.T, c *kubelite.Client) string {
	t.Helper()
	review := &authenticationv1.SelfSubjectReview{}
	path := kubelite.Resource{Group: "authentication.k8s.io", Version: "v1", Resource: "selfsubjectreviews"}.Path("", "")
	if err := c.Create(context.Background(), path, &authenticationv1.SelfSubjectReview{}, review); err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo.Username
}

// inCluster points the in-cluster configuration at the test's API server, with token in the
// service account's token file, and returns that folder.
func inCluster(t *testing.T, token string) string {
	t.Helper()
	host, port, ok := strings.Cut(strings.TrimPrefix(env.Config.Host, "https://"), ":")
	if !ok {
		t.Fatalf("the API server %s has no port", env.Config.Host)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), env.Config.CAData)
	write(t, filepath.Join(dir, "token"), []byte(token))
	return dir
}

// TestInClusterFollowsTheRotatedToken: in a pod, the kubelet rotates the service account's
// token in its file; the client reads it again every TokenReread, and at once when the
// server no longer accepts the token it had, the request sent again with the new one.
func TestInClusterFollowsTheRotatedToken(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	prefix := "system:serviceaccount:" + ns + ":"

	t.Run("read again every TokenReread", func(t *testing.T) {
		dir := inCluster(t, token(t, ns, "agent-a", nil))
		cfg, err := kubelite.InClusterAt(dir)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TokenReread = 100 * time.Millisecond
		c, err := kubelite.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if who := whoAmI(t, c); who != prefix+"agent-a" {
			t.Fatalf("the client is %s; want agent-a", who)
		}
		writeAtomically(t, filepath.Join(dir, "token"), token(t, ns, "agent-b", nil)+"\n")
		testenv.Eventually(t, patience, func() string {
			if who := whoAmI(t, c); who != prefix+"agent-b" {
				return "the client is still " + who
			}
			return ""
		})
	})

	t.Run("read again when refused", func(t *testing.T) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "binds-the-token"}}
		if err := env.Client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		dir := inCluster(t, token(t, ns, "agent-a", secret))
		cfg, err := kubelite.InClusterAt(dir)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TokenReread = time.Hour // only a refusal makes it read the file again
		c, err := kubelite.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if who := whoAmI(t, c); who != prefix+"agent-a" {
			t.Fatalf("the client is %s; want agent-a", who)
		}
		// The kubelet writes a new token; the old one stops being accepted (its Secret goes).
		writeAtomically(t, filepath.Join(dir, "token"), token(t, ns, "agent-b", nil))
		if err := env.Client.Delete(ctx, secret); err != nil {
			t.Fatal(err)
		}
		// Every request succeeds: the first one refused is sent again with the new token.
		testenv.Eventually(t, patience, func() string {
			if who := whoAmI(t, c); who != prefix+"agent-b" {
				return "the client is still " + who
			}
			return ""
		})
		// A token nobody accepts, read after a refusal, is the server's refusal.
		writeAtomically(t, filepath.Join(dir, "token"), "not-a-token")
		bad, err := kubelite.InClusterAt(dir)
		if err != nil {
			t.Fatal(err)
		}
		bc, _ := kubelite.New(bad)
		err = bc.Get(ctx, kubelite.Resource{Version: "v1", Resource: "namespaces"}.Path("", ns), &corev1.Namespace{})
		if !kubelite.IsUnauthorized(err) {
			t.Errorf("with a token the server does not accept: %v; want Unauthorized", err)
		}
	})
}
