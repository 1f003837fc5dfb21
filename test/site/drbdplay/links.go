package drbdplay

import (
	"bufio"
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Links plays DRBD's connections between nodes with real packets on the played storage
// network: each node listens on its storage address and keeps a TCP connection to every peer,
// on which it says every LinkInterval who it is and which resources it has paused the
// resynchronisation of towards that peer. A node counts a peer connected while it heard from it
// within LinkTimeout and its own last write to it went through. So a node whose bond stops
// carrying traffic really loses its peers, and finds them again when it carries again.
type Links struct {
	// Self is this node's name; Listen its address and port on the storage network.
	Self, Listen string
	// Peers are the peers' addresses and ports, by name.
	Peers map[string]string
	// Paused lists the resources this node paused the resynchronisation of towards peer (the
	// kernel's pause flags); none when nil.
	Paused func(peer string) []string

	mu     sync.Mutex
	heard  map[string]time.Time
	wrote  map[string]time.Time
	paused map[string][]string
}

// How often a node speaks on each link, and how long a silent link still counts as connected.
const (
	LinkInterval = 100 * time.Millisecond
	LinkTimeout  = 600 * time.Millisecond
)

// Run listens and dials until ctx ends.
func (l *Links) Run(ctx context.Context) error {
	l.mu.Lock()
	l.heard, l.wrote, l.paused = map[string]time.Time{}, map[string]time.Time{}, map[string][]string{}
	l.mu.Unlock()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", l.Listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	for peer, addr := range l.Peers {
		go l.dial(ctx, peer, addr)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		go l.listen(ctx, c)
	}
}

// listen reads what a peer says on an accepted connection.
func (l *Links) listen(ctx context.Context, c net.Conn) {
	defer func() { _ = c.Close() }()
	go func() {
		<-ctx.Done()
		_ = c.Close()
	}()
	r := bufio.NewScanner(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(LinkTimeout))
		if !r.Scan() {
			return
		}
		peer, paused, _ := strings.Cut(r.Text(), "\t")
		if _, ok := l.Peers[peer]; !ok {
			return
		}
		var list []string
		if paused != "" {
			list = strings.Split(paused, ",")
		}
		l.mu.Lock()
		l.heard[peer], l.paused[peer] = time.Now(), list
		l.mu.Unlock()
	}
}

// dial keeps a connection to peer, saying who this node is and what it paused towards it.
func (l *Links) dial(ctx context.Context, peer, addr string) {
	for ctx.Err() == nil {
		d := net.Dialer{Timeout: LinkTimeout}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			sleep(ctx, LinkInterval)
			continue
		}
		for ctx.Err() == nil {
			var paused []string
			if l.Paused != nil {
				paused = l.Paused(peer)
			}
			_ = c.SetWriteDeadline(time.Now().Add(LinkTimeout))
			if _, err := c.Write([]byte(l.Self + "\t" + strings.Join(paused, ",") + "\n")); err != nil {
				break
			}
			l.mu.Lock()
			l.wrote[peer] = time.Now()
			l.mu.Unlock()
			sleep(ctx, LinkInterval)
		}
		_ = c.Close()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Connected reports whether the link to peer carries traffic both ways.
func (l *Links) Connected(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	return now.Sub(l.heard[peer]) < LinkTimeout && now.Sub(l.wrote[peer]) < LinkTimeout
}

// PeerPaused reports whether peer said it paused the resynchronisation of resource towards
// this node.
func (l *Links) PeerPaused(peer, resource string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.paused[peer], resource)
}
