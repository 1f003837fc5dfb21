package drbdplay

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// StreamPoll is how often an open events2 stream looks at what the played kernel cannot
// announce itself: the links of the storage network and the fault hook's files. A command
// (drbdadm, a status read) wakes the streams at once.
const StreamPoll = 50 * time.Millisecond

// Stream answers `drbdsetup events2 [--now] [--statistics]` as drbdsetup 9.22 prints it
// (user/v9/drbdsetup_events2.c, internal/drbd/testdata/events2): an "exists" line for each
// object of the played state, "exists -", then, unless --now, a "create", "change" or "destroy"
// line for each object whose state changes, with only the fields that changed, until ctx ends
// or the stream is closed. As DRBD does, a change of the statistics alone (a resync's or a
// verification's progress) is not announced; they come with the next change of the peer
// device's state.
func (k *Kernel) Stream(ctx context.Context, argv []string) (io.ReadCloser, error) {
	now, statistics, err := events2Options(argv)
	if err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	wake := make(chan struct{}, 1)
	if !now {
		k.streamsMu.Lock()
		if k.streams == nil {
			k.streams = map[chan struct{}]bool{}
		}
		k.streams[wake] = true
		k.streamsMu.Unlock()
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		defer func() {
			k.streamsMu.Lock()
			delete(k.streams, wake)
			k.streamsMu.Unlock()
		}()
		p := printer{statistics: statistics, links: k.Links}
		last := k.peek()
		for _, name := range slices.Sorted(maps.Keys(last)) {
			p.create(drbd.EventExists, last[name])
		}
		p.line("exists -")
		if err := p.flush(w); err != nil || now {
			_ = w.Close()
			return
		}
		ticker := time.NewTicker(StreamPoll)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				_ = w.CloseWithError(ctx.Err())
				return
			case <-ticker.C:
			case <-wake:
			}
			last = p.changes(last, k.peek())
			if err := p.flush(w); err != nil {
				return
			}
		}
	}()
	return &stream{r: r, cancel: cancel}, nil
}

// events2Options reads drbdsetup events2's options the played kernel answers.
func events2Options(argv []string) (now, statistics bool, err error) {
	if len(argv) < 2 || filepath.Base(argv[0]) != "drbdsetup" || argv[1] != "events2" {
		return false, false, fmt.Errorf("the played DRBD streams only drbdsetup events2, not %q", argv)
	}
	for _, a := range argv[2:] {
		switch a {
		case "--now":
			now = true
		case "--statistics":
			statistics = true
		case "all":
		default:
			return false, false, fmt.Errorf("the played drbdsetup events2 does not take %q", a)
		}
	}
	return now, statistics, nil
}

type stream struct {
	r      *io.PipeReader
	cancel context.CancelFunc
}

func (s *stream) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *stream) Close() error {
	s.cancel()
	return s.r.Close()
}

// wake tells every open stream to look at the state again; it never blocks.
func (k *Kernel) wake() {
	k.streamsMu.Lock()
	defer k.streamsMu.Unlock()
	for c := range k.streams {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// playedResource is one resource as a stream last printed it.
type playedResource struct {
	drbd.Resource
	// flags are the pause flags towards each peer (resync-suspended).
	flags map[string]string
}

// peek is the played state now, without moving a verification on.
func (k *Kernel) peek() map[string]playedResource {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncConfig()
	defer k.readPass()()
	out := map[string]playedResource{}
	for name, r := range k.resources {
		res, flags := k.resourceState(name, r, false)
		out[name] = playedResource{res, flags}
	}
	return out
}

// printer writes events2 lines.
type printer struct {
	statistics bool
	links      *Links
	buf        strings.Builder
}

func (p *printer) line(format string, args ...any) {
	fmt.Fprintf(&p.buf, format, args...)
	p.buf.WriteByte('\n')
}

func (p *printer) flush(w io.Writer) error {
	if p.buf.Len() == 0 {
		return nil
	}
	_, err := io.WriteString(w, p.buf.String())
	p.buf.Reset()
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func suspended(b bool) string {
	if b {
		return "user"
	}
	return "no"
}

// create prints every object of r, in print_changes' order: the resource, its connections, its
// devices, then each connection's peer devices and paths.
func (p *printer) create(action string, r playedResource) {
	stats := ""
	if p.statistics {
		stats = " write-ordering:flush"
	}
	p.line("%s resource name:%s role:%s suspended:%s force-io-failures:no%s may_promote:no promotion_score:0", action, r.Name, r.Role, suspended(r.Suspended), stats)
	for _, c := range r.Connections {
		p.connection(action, r.Name, c, true, true)
	}
	for _, d := range r.Devices {
		p.device(action, r.Name, d)
	}
	for _, c := range r.Connections {
		for _, pd := range c.PeerDevices {
			p.peerDevice(action, r.Name, c, pd, r.flags[c.Name], true, true, true, true)
		}
		p.path(action, r.Name, c)
	}
}

func (p *printer) connection(action, res string, c drbd.Connection, state, role bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s connection name:%s peer-node-id:%d conn-name:%s", action, res, c.PeerNodeID, c.Name)
	if state {
		fmt.Fprintf(&b, " connection:%s", c.ConnectionState)
	}
	if role {
		fmt.Fprintf(&b, " role:%s", c.PeerRole)
	}
	if p.statistics && action != drbd.EventChange {
		b.WriteString(" congested:no ap-in-flight:0 rs-in-flight:0")
	}
	p.line("%s", b.String())
}

func (p *printer) device(action, res string, d drbd.Device) {
	backing := "/dev/null"
	if d.Client {
		backing = "none"
	}
	stats := ""
	if p.statistics && action != drbd.EventChange {
		stats = " read:0 written:0"
	}
	p.line("%s device name:%s volume:%d minor:%d backing_dev:%s disk:%s client:%s quorum:%s%s", action, res, d.Volume, d.Minor, backing,
		d.DiskState, yesNo(d.Client), yesNo(d.Quorum), stats)
}

func (p *printer) peerDevice(action, res string, c drbd.Connection, pd drbd.PeerDevice, flag string, repl, disk, susp, stats bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s peer-device name:%s peer-node-id:%d conn-name:%s volume:%d", action, res, c.PeerNodeID, c.Name, pd.Volume)
	if repl {
		fmt.Fprintf(&b, " replication:%s", pd.ReplicationState)
	}
	if disk {
		fmt.Fprintf(&b, " peer-disk:%s peer-client:%s", pd.PeerDiskState, yesNo(pd.PeerClient))
	}
	if susp {
		fmt.Fprintf(&b, " resync-suspended:%s", flag)
	}
	if stats {
		// print_peer_device_statistics: done while a resync or verify runs, then, with
		// --statistics, received, sent and out-of-sync when it is not 0.
		if pd.ResyncDonePercent != nil {
			fmt.Fprintf(&b, " done:%.2f", *pd.ResyncDonePercent)
		}
		if p.statistics {
			b.WriteString(" received:0 sent:0")
			if pd.OutOfSyncKiB != 0 {
				fmt.Fprintf(&b, " out-of-sync:%d", pd.OutOfSyncKiB)
			}
		}
	}
	p.line("%s", b.String())
}

// path prints the connection's path when the links are played on the storage network, whose
// addresses it names; established while the connection is Connected.
func (p *printer) path(action, res string, c drbd.Connection) {
	if p.links == nil || p.links.Peers[c.Name] == "" {
		return
	}
	p.line("%s path name:%s peer-node-id:%d conn-name:%s local:ipv4:%s peer:ipv4:%s established:%s", action, res, c.PeerNodeID, c.Name,
		p.links.Listen, p.links.Peers[c.Name], yesNo(c.ConnectionState == drbd.ConnectionConnected))
}

func sameStatistics(a, b drbd.PeerDevice) bool {
	if a.OutOfSyncKiB != b.OutOfSyncKiB || (a.ResyncDonePercent == nil) != (b.ResyncDonePercent == nil) {
		return false
	}
	return a.ResyncDonePercent == nil || *a.ResyncDonePercent == *b.ResyncDonePercent
}

// changes prints what changed from last to now and returns the state as printed: a peer
// device whose statistics alone changed keeps those last printed.
func (p *printer) changes(last, now map[string]playedResource) map[string]playedResource {
	printed := map[string]playedResource{}
	for _, name := range slices.Sorted(maps.Keys(now)) {
		r := now[name]
		old, ok := last[name]
		if !ok {
			p.create(drbd.EventCreate, r)
			printed[name] = r
			continue
		}
		printed[name] = p.resourceChanges(old, r)
	}
	for _, name := range slices.Sorted(maps.Keys(last)) {
		if _, ok := now[name]; !ok {
			p.destroy(last[name])
		}
	}
	return printed
}

func findConnection(r drbd.Resource, name string) (drbd.Connection, bool) {
	i := slices.IndexFunc(r.Connections, func(c drbd.Connection) bool { return c.Name == name })
	if i < 0 {
		return drbd.Connection{}, false
	}
	return r.Connections[i], true
}

func findPeerDevice(c drbd.Connection, volume int) (drbd.PeerDevice, bool) {
	i := slices.IndexFunc(c.PeerDevices, func(p drbd.PeerDevice) bool { return p.Volume == volume })
	if i < 0 {
		return drbd.PeerDevice{}, false
	}
	return c.PeerDevices[i], true
}

func (p *printer) resourceChanges(old, r playedResource) playedResource {
	const change = drbd.EventChange
	if old.Role != r.Role || old.Suspended != r.Suspended {
		var b strings.Builder
		fmt.Fprintf(&b, "change resource name:%s", r.Name)
		if old.Role != r.Role {
			fmt.Fprintf(&b, " role:%s", r.Role)
		}
		if old.Suspended != r.Suspended {
			fmt.Fprintf(&b, " suspended:%s", suspended(r.Suspended))
		}
		p.line("%s", b.String())
	}
	for _, c := range r.Connections {
		oc, ok := findConnection(old.Resource, c.Name)
		switch {
		case !ok:
			p.connection(drbd.EventCreate, r.Name, c, true, true)
		case oc.ConnectionState != c.ConnectionState || oc.PeerRole != c.PeerRole:
			p.connection(change, r.Name, c, oc.ConnectionState != c.ConnectionState, oc.PeerRole != c.PeerRole)
		}
	}
	for _, d := range r.Devices {
		i := slices.IndexFunc(old.Devices, func(o drbd.Device) bool { return o.Volume == d.Volume })
		switch {
		case i < 0:
			p.device(drbd.EventCreate, r.Name, d)
		case old.Devices[i].DiskState != d.DiskState || old.Devices[i].Quorum != d.Quorum || old.Devices[i].Client != d.Client:
			p.device(change, r.Name, d)
		}
	}
	printed := r
	printed.Connections = slices.Clone(r.Connections)
	for ci, c := range r.Connections {
		oc, connOK := findConnection(old.Resource, c.Name)
		printed.Connections[ci].PeerDevices = slices.Clone(c.PeerDevices)
		for pi, pd := range c.PeerDevices {
			opd, ok := findPeerDevice(oc, pd.Volume)
			if !connOK || !ok {
				p.peerDevice(drbd.EventCreate, r.Name, c, pd, r.flags[c.Name], true, true, true, true)
				continue
			}
			repl := opd.ReplicationState != pd.ReplicationState
			disk := opd.PeerDiskState != pd.PeerDiskState || opd.PeerClient != pd.PeerClient
			susp := old.flags[c.Name] != r.flags[c.Name]
			if !repl && !disk && !susp {
				// The statistics alone: DRBD does not announce them; the stream keeps those it
				// printed last.
				printed.Connections[ci].PeerDevices[pi].OutOfSyncKiB = opd.OutOfSyncKiB
				printed.Connections[ci].PeerDevices[pi].ResyncDonePercent = opd.ResyncDonePercent
				continue
			}
			p.peerDevice(change, r.Name, c, pd, r.flags[c.Name], repl, disk, susp, !sameStatistics(opd, pd))
		}
		if connOK && (oc.ConnectionState == drbd.ConnectionConnected) != (c.ConnectionState == drbd.ConnectionConnected) {
			p.path(change, r.Name, c)
		}
	}
	for _, oc := range old.Connections {
		if _, ok := findConnection(r.Resource, oc.Name); !ok {
			p.destroyConnection(r.Name, oc)
		}
	}
	for _, od := range old.Devices {
		if !slices.ContainsFunc(r.Devices, func(d drbd.Device) bool { return d.Volume == od.Volume }) {
			p.line("destroy device name:%s volume:%d", r.Name, od.Volume)
		}
	}
	return printed
}

func (p *printer) destroyConnection(res string, c drbd.Connection) {
	if p.links != nil && p.links.Peers[c.Name] != "" {
		p.line("destroy path name:%s peer-node-id:%d conn-name:%s local:ipv4:%s peer:ipv4:%s", res, c.PeerNodeID, c.Name, p.links.Listen, p.links.Peers[c.Name])
	}
	for _, pd := range c.PeerDevices {
		p.line("destroy peer-device name:%s peer-node-id:%d conn-name:%s volume:%d", res, c.PeerNodeID, c.Name, pd.Volume)
	}
	p.line("destroy connection name:%s peer-node-id:%d conn-name:%s", res, c.PeerNodeID, c.Name)
}

// destroy prints the end of every object of r, as drbd-utils' events2-all-create-destroy test
// shows it: paths, peer devices, connections, devices, the resource.
func (p *printer) destroy(r playedResource) {
	for _, c := range r.Connections {
		p.destroyConnection(r.Name, c)
	}
	for _, d := range r.Devices {
		p.line("destroy device name:%s volume:%d", r.Name, d.Volume)
	}
	p.line("destroy resource name:%s", r.Name)
}
