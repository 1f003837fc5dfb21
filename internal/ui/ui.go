// Package ui serves the thin web UI behind `kubectl nodewright ui`: a page on 127.0.0.1 that
// shows the cluster's health, the migrations, the replication upgrades, the bond-mode flips
// and the audit trail, live, can start and cancel a migration, and approves the step a Manual
// flip or upgrade waits on; and, for a VM's owner, one namespace's VMs, the operations asked
// for on them (VMOperationRequests), their snapshots and migrations, with a form per operation.
//
// It acts with the user's own credentials (the rest.Config from their kubeconfig), never with
// privileges of its own: what the page shows is what the user may read, and what it does is
// an ordinary create, delete or patch by the user, which the admission webhooks check and
// stamp with the user's name. The local server answers its API only to requests that carry the random
// token of the URL it printed (in the URL's fragment, which the page keeps per tab and sends
// in a header), addressed to a loopback host name and sent by its own page; so neither another
// web page open in the same browser nor another web server on 127.0.0.1 can use the user's
// cluster credentials through it.
//
// Updates come from watches on the API server and reach the page as server-sent events; the
// page never polls. The static assets are embedded: no CDN and no build step.
package ui

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// Options configure the UI.
type Options struct {
	// Addr is where the server listens: a loopback address (127.0.0.1, ::1 or localhost)
	// with a port; "127.0.0.1:0", the default, takes a free port.
	Addr string
	// OpenBrowser opens the page in the user's browser (xdg-open or open) once the server
	// listens, through a file only the user can read (0600, in a 0700 temporary folder,
	// removed when the server stops) that carries the token and leads to the page: the
	// opener's command line, which every local user can read, names only the file. A
	// failure to open it is not fatal, the URL is printed anyway.
	OpenBrowser bool
	// Out receives the page's URL, with its token: the only place the full URL is written
	// to. Standard output when nil.
	Out io.Writer
	// Namespace scopes the migrations the page shows and creates, and is the namespace
	// view's; empty shows every namespace the user may list, and the form asks for one.
	Namespace string
	// DefaultNamespace is the namespace the form starts with, and the namespace view's, when
	// Namespace is empty: the kubeconfig context's, as kubectl would use it (`ui` sets it);
	// "default" when empty.
	DefaultNamespace string
	// TrailDir is a local folder holding an audit trail (audit-*.jsonl), such as the demo's
	// .demo/audit; empty: the page says that no trail was given. The operator's own trail
	// lives in its pod, out of the user's reach.
	TrailDir string
	// TrailKeys are files holding the public keys the trail's checkpoints are verified
	// with (PEM, or the 32 bytes raw, hex or base64); without one the records are shown
	// unverified, and the page says so.
	TrailKeys []string
	// Fleet points the UI at a fleet hub: the page shows the hub's member clusters (its
	// NodewrightClusterSummaries) and, for each, the command to act on it with; it only reads,
	// and offers no action (the hub never acts on a member).
	Fleet bool
	// Token is the secret the page's URL carries; empty makes a random one. Tests set it.
	Token string
	// Log receives what goes wrong while the UI runs (a trail folder it cannot watch, say);
	// standard error when nil. The page says the same.
	Log io.Writer
}

// DefaultAddr takes a free port on the IPv4 loopback address.
const DefaultAddr = "127.0.0.1:0"

func (o *Options) setDefaults() error {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	switch {
	case o.Namespace != "":
		o.DefaultNamespace = o.Namespace
	case o.DefaultNamespace == "":
		o.DefaultNamespace = "default"
	}
	if o.Token == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("making the UI's token: %w", err)
		}
		o.Token = base64.RawURLEncoding.EncodeToString(b)
	}
	return nil
}

// NewHandler returns the UI's HTTP handler: the page, its assets, its event stream and its
// actions, each behind the token and host checks. Run serves it; tests serve it themselves.
// The watches start with the first page that connects and stop a little after the last one
// leaves.
func NewHandler(cfg *rest.Config, opts Options) (http.Handler, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	return newServer(cfg, opts)
}

// Run serves the UI on opts.Addr until ctx ends, printing its URL to opts.Out and, with
// OpenBrowser, opening it.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}
	if err := checkLoopback(opts.Addr); err != nil {
		return err
	}
	s, err := newServer(cfg, opts)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", opts.Addr, err)
	}
	// The token rides in the fragment: browsers never send it to a server, nor in a Referer.
	url := fmt.Sprintf("http://%s/#token=%s", ln.Addr().String(), opts.Token)
	if _, err := fmt.Fprintf(opts.Out, "Nodewright UI: %s\n", url); err != nil {
		_ = ln.Close()
		return err
	}
	if opts.OpenBrowser {
		// Through a file only the user can read: the opener's command line is public.
		l, err := openBrowser(url)
		if err != nil {
			fmt.Fprintf(opts.Out, "Could not open a browser (%v): open the URL above.\n", err)
		}
		if l != nil {
			defer l.remove()
		}
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		s.hub.close()
		return fmt.Errorf("serving the UI: %w", err)
	case <-ctx.Done():
	}
	// The event streams end with ctx (their requests' base context), so shutting down does
	// not wait for them.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	s.hub.close()
	if errors.Is(<-done, http.ErrServerClosed) && err == nil {
		return nil
	}
	return err
}

// checkLoopback refuses an address that another machine could reach.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("address %q: the UI uses your cluster credentials, so it listens only on a loopback address (127.0.0.1, ::1 or localhost)", addr)
}
