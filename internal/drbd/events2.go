package drbd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Events2Command follows DRBD: `drbdsetup events2 --statistics` prints the state of every
// object ("exists" lines), the line "exists -" once that dump is complete, then every change
// as the kernel announces it, until it is stopped. (With --now it would stop after the dump.)
func Events2Command() []string { return []string{Drbdsetup, "events2", "--statistics"} }

// The bounds of what Events2 reads. A line of drbdsetup events2 is a few hundred bytes (a path
// line with two IPv6 addresses is the longest); a node of a small edge cluster holds some tens
// of resources.
const (
	// MaxEventLineBytes is the longest line Events2 reads.
	MaxEventLineBytes = 4096
	// MaxEventFields is the most key:value fields one line may carry.
	MaxEventFields = 64
	// MaxEventObjects is the most devices, connections and peer devices, all resources
	// together, Events2 keeps; resources are bounded by MaxStatusResources.
	MaxEventObjects = 20000
	// MaxEventConnections is the most connections of one resource: DRBD 9 has at most 32
	// nodes in a resource.
	MaxEventConnections = 31
	// MaxEventVolumes is the most volumes of one resource Events2 keeps.
	MaxEventVolumes = 256
)

// The words that start an events2 line (drbd-utils user/v9/drbdsetup_events2.c).
const (
	EventExists   = "exists"
	EventCreate   = "create"
	EventChange   = "change"
	EventDestroy  = "destroy"
	EventCall     = "call"
	EventResponse = "response"
	EventRename   = "rename"
)

// The objects an events2 line is about; "-" after "exists" ends the dump of the current state.
const (
	ObjectResource   = "resource"
	ObjectDevice     = "device"
	ObjectConnection = "connection"
	ObjectPeerDevice = "peer-device"
	ObjectPath       = "path"
	ObjectHelper     = "helper"
	ObjectDumpDone   = "-"
)

// Event is one line of drbdsetup events2: what happened, to which object, and the object's
// key:value fields in the order printed.
type Event struct {
	Action string
	Object string
	Fields []EventField
}

// EventField is one key:value word of a line. The value is what follows the first colon, so
// that a path's "local:ipv4:10.0.0.1:7000" is the key "local" and the value "ipv4:10.0.0.1:7000".
type EventField struct {
	Key, Value string
}

// Value is the value of key, and whether the line has it.
func (e Event) Value(key string) (string, bool) {
	for _, f := range e.Fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}

// EventError is an events2 line refused: Line counts the lines read (from 1), Field names the
// word at fault (action, object, or a field's key) and Reason says what is wrong with it.
type EventError struct {
	Line   int
	Field  string
	Reason string
}

func (e *EventError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("drbdsetup events2: line %d: %s: %s", e.Line, e.Field, e.Reason)
	}
	return fmt.Sprintf("drbdsetup events2: %s: %s", e.Field, e.Reason)
}

var actions = []string{EventExists, EventCreate, EventChange, EventDestroy, EventCall, EventResponse, EventRename}

// ParseEvent reads one line of drbdsetup events2, without its line break. Words are separated
// by spaces; a field is key:value, both non-empty, each key once. A word with a byte below
// 0x20 (drbdsetup's --color escapes) or invalid UTF-8 is refused.
func ParseEvent(line string) (Event, error) {
	if len(line) > MaxEventLineBytes {
		return Event{}, &EventError{Field: "line", Reason: fmt.Sprintf("%d bytes, more than the %d this parser reads", len(line), MaxEventLineBytes)}
	}
	if !utf8.ValidString(line) {
		return Event{}, &EventError{Field: "line", Reason: "not valid UTF-8"}
	}
	if i := strings.IndexFunc(line, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return Event{}, &EventError{Field: "line", Reason: fmt.Sprintf("a control character (%q) at byte %d", line[i], i)}
	}
	words := strings.Split(line, " ")
	if len(words) < 2 {
		return Event{}, &EventError{Field: "object", Reason: fmt.Sprintf("missing: the line %q is not \"<action> <object> ...\"", clipText(line))}
	}
	ev := Event{Action: words[0], Object: words[1]}
	if !slices.Contains(actions, ev.Action) {
		return Event{}, &EventError{Field: "action", Reason: fmt.Sprintf("%q is not one of %s", clipText(ev.Action), strings.Join(actions, ", "))}
	}
	if ev.Object == "" {
		return Event{}, &EventError{Field: "object", Reason: "empty (two spaces after the action)"}
	}
	if ev.Object == ObjectDumpDone && (ev.Action != EventExists || len(words) > 2) {
		return Event{}, &EventError{Field: "object", Reason: "\"-\" ends the dump only as the whole line \"exists -\""}
	}
	if len(words)-2 > MaxEventFields {
		return Event{}, &EventError{Field: "line", Reason: fmt.Sprintf("%d fields, more than the %d this parser accepts", len(words)-2, MaxEventFields)}
	}
	for _, w := range words[2:] {
		key, value, ok := strings.Cut(w, ":")
		switch {
		case w == "":
			return Event{}, &EventError{Field: "line", Reason: "an empty field (two spaces in a row, or a space at the end)"}
		case !ok || key == "":
			return Event{}, &EventError{Field: clipText(w), Reason: "not key:value"}
		case value == "":
			return Event{}, &EventError{Field: key, Reason: "empty value"}
		}
		if _, dup := ev.Value(key); dup {
			return Event{}, &EventError{Field: key, Reason: "given twice"}
		}
		ev.Fields = append(ev.Fields, EventField{Key: key, Value: value})
	}
	return ev, nil
}

// clipText cuts a word quoted in an error, so that a hostile line cannot make the message long.
func clipText(s string) string {
	const most = 40
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Events2 is the state of DRBD as drbdsetup events2 tells it: Apply each line in order, and
// Resources gives the same []Resource ParseStatus gives for `drbdsetup status --json` in that
// state, but for the node-id of the resource on this node (-1: events2 does not print it) and
// the device statistics events2 prints only when the kernel sent them. drbdsetup keeps track
// of the objects itself and prints each change against what it printed before: a change,
// destroy or rename of an object it did not announce, or a create of one it did, means the
// stream and this state disagree, and is an error.
type Events2 struct {
	resources map[string]*eventResource
	objects   int
	dumped    bool
	lines     int
}

type eventResource struct {
	r Resource
	// resyncSuspended holds each peer device's pause flags ("no", "user", "peer",
	// "dependency"...), by connection name and volume: ParseStatus's Resource has no field for
	// them, but a change of them is a change that matters.
	resyncSuspended map[string]map[int]string
}

// Effect is what one line changed.
type Effect struct {
	// Significant: an object came or went, or a state a report shows changed: a role, a
	// disk's, a connection's or a replication's state, a pause flag, the suspension of I/O,
	// quorum, a diskless client. Statistics alone (out-of-sync, done) are not significant.
	Significant bool
	// DumpDone: the line was "exists -", the end of the current state's dump.
	DumpDone bool
}

// Dumped reports whether the dump of the current state ended ("exists -").
func (s *Events2) Dumped() bool { return s.dumped }

// Read applies each line of r to s until r ends or a line is refused, calling changed (when
// not nil) with what each line changed. It returns nil at the end of r, or the first error:
// r's, or an *EventError naming the line and the field.
func (s *Events2) Read(r io.Reader, changed func(Effect)) error {
	br := bufio.NewReaderSize(r, MaxEventLineBytes+1)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			s.lines++
			return &EventError{Line: s.lines, Field: "line", Reason: fmt.Sprintf("longer than the %d bytes this parser reads", MaxEventLineBytes)}
		}
		if len(line) > 0 {
			if err == nil || errors.Is(err, io.EOF) {
				c, applyErr := s.Apply(strings.TrimSuffix(string(line), "\n"))
				if applyErr != nil {
					return applyErr
				}
				if changed != nil {
					changed(c)
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Apply applies one line, without its line break, to s.
func (s *Events2) Apply(line string) (Effect, error) {
	s.lines++
	ev, err := ParseEvent(line)
	if err == nil {
		var c Effect
		c, err = s.apply(ev)
		if err == nil {
			return c, nil
		}
	}
	var evErr *EventError
	if errors.As(err, &evErr) && evErr.Line == 0 {
		evErr.Line = s.lines
	}
	return Effect{}, err
}

func (s *Events2) apply(ev Event) (Effect, error) {
	if s.resources == nil {
		s.resources = map[string]*eventResource{}
	}
	if ev.Object == ObjectDumpDone {
		first := !s.dumped
		s.dumped = true
		return Effect{DumpDone: true, Significant: first}, nil
	}
	switch ev.Action {
	case EventCall, EventResponse:
		// A handler called or returned (helper): no state of the objects.
		return Effect{}, nil
	}
	switch ev.Object {
	case ObjectResource:
		return s.applyResource(ev)
	case ObjectDevice:
		return s.applyDevice(ev)
	case ObjectConnection:
		return s.applyConnection(ev)
	case ObjectPeerDevice:
		return s.applyPeerDevice(ev)
	}
	// A path (its addresses and whether it is established) is no state ParseStatus keeps; an
	// object a newer drbdsetup prints is ignored, as ParseStatus ignores fields it does not
	// know.
	return Effect{}, nil
}

// fieldsOf reads an event's fields.
type fieldsOf struct{ ev Event }

func (f fieldsOf) required(key string) (string, error) {
	v, ok := f.ev.Value(key)
	if !ok {
		return "", &EventError{Field: key, Reason: fmt.Sprintf("missing from %s %s", f.ev.Action, f.ev.Object)}
	}
	return v, nil
}

// integer reads a whole number from 0 to maximum.
func (f fieldsOf) integer(key string, maximum int) (int, error) {
	v, err := f.required(key)
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseUint(v, 10, 32)
	if perr != nil || n > uint64(maximum) {
		return 0, &EventError{Field: key, Reason: fmt.Sprintf("want an integer from 0 to %d, got %q", maximum, clipText(v))}
	}
	return int(n), nil
}

// yesNo sets *dst from a yes or no, when the line has the field.
func (f fieldsOf) yesNo(key string, dst *bool) error {
	v, ok := f.ev.Value(key)
	if !ok {
		return nil
	}
	switch v {
	case "yes":
		*dst = true
	case "no":
		*dst = false
	default:
		return &EventError{Field: key, Reason: fmt.Sprintf("want yes or no, got %q", clipText(v))}
	}
	return nil
}

// counter sets *dst from a non-negative count, when the line has the field.
func (f fieldsOf) counter(key string, dst *uint64) (bool, error) {
	v, ok := f.ev.Value(key)
	if !ok {
		return false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return false, &EventError{Field: key, Reason: fmt.Sprintf("want a non-negative integer, got %q", clipText(v))}
	}
	*dst = n
	return true, nil
}

// text sets *dst, when the line has the field, and says whether it changed.
func (f fieldsOf) text(key string, dst *string) bool {
	v, ok := f.ev.Value(key)
	if !ok || v == *dst {
		return false
	}
	*dst = v
	return true
}

// name reads the resource's name.
func (f fieldsOf) name() (string, error) { return f.required("name") }

func (s *Events2) lookup(f fieldsOf) (*eventResource, error) {
	name, err := f.name()
	if err != nil {
		return nil, err
	}
	r := s.resources[name]
	if r == nil {
		return nil, &EventError{Field: "name", Reason: fmt.Sprintf("%s %s of resource %q, which the stream did not announce", f.ev.Action, f.ev.Object, clipText(name))}
	}
	return r, nil
}

// creates: the action announces a new object.
func creates(action string) bool { return action == EventExists || action == EventCreate }

func (s *Events2) applyResource(ev Event) (Effect, error) {
	f := fieldsOf{ev}
	name, err := f.name()
	if err != nil {
		return Effect{}, err
	}
	r := s.resources[name]
	switch {
	case creates(ev.Action):
		if r != nil {
			return Effect{}, &EventError{Field: "name", Reason: fmt.Sprintf("%s resource %q, which the stream already announced", ev.Action, clipText(name))}
		}
		if len(s.resources) >= MaxStatusResources {
			return Effect{}, &EventError{Field: "name", Reason: fmt.Sprintf("a resource more than the %d this parser accepts", MaxStatusResources)}
		}
		r = &eventResource{r: Resource{Name: name, NodeID: -1, Devices: []Device{}, Connections: []Connection{}}, resyncSuspended: map[string]map[int]string{}}
		if err := setResource(f, &r.r); err != nil {
			return Effect{}, err
		}
		s.resources[name] = r
		return Effect{Significant: true}, nil
	case r == nil:
		return Effect{}, &EventError{Field: "name", Reason: fmt.Sprintf("%s resource %q, which the stream did not announce", ev.Action, clipText(name))}
	case ev.Action == EventDestroy:
		s.objects -= r.count()
		delete(s.resources, name)
		return Effect{Significant: true}, nil
	case ev.Action == EventRename:
		newName, err := f.required("new_name")
		if err != nil {
			return Effect{}, err
		}
		if s.resources[newName] != nil {
			return Effect{}, &EventError{Field: "new_name", Reason: fmt.Sprintf("resource %q is already announced", clipText(newName))}
		}
		delete(s.resources, name)
		r.r.Name = newName
		s.resources[newName] = r
		return Effect{Significant: true}, nil
	}
	before := r.r
	if err := setResource(f, &r.r); err != nil {
		r.r = before
		return Effect{}, err
	}
	return Effect{Significant: before.Role != r.r.Role || before.Suspended != r.r.Suspended}, nil
}

func setResource(f fieldsOf, r *Resource) error {
	f.text("role", &r.Role)
	if v, ok := f.ev.Value("suspended"); ok {
		// "no", or the reasons: user, no-data, fencing, quorum, joined by commas.
		r.Suspended = v != "no"
	}
	return nil
}

func (r *eventResource) count() int {
	n := len(r.r.Devices) + len(r.r.Connections)
	for _, c := range r.r.Connections {
		n += len(c.PeerDevices)
	}
	return n
}

func (s *Events2) room(what string) error {
	if s.objects >= MaxEventObjects {
		return &EventError{Field: "name", Reason: fmt.Sprintf("a %s more than the %d devices, connections and peer devices this parser keeps", what, MaxEventObjects)}
	}
	return nil
}

func (s *Events2) applyDevice(ev Event) (Effect, error) {
	f := fieldsOf{ev}
	r, err := s.lookup(f)
	if err != nil {
		return Effect{}, err
	}
	volume, err := f.integer("volume", 65535)
	if err != nil {
		return Effect{}, err
	}
	i := slices.IndexFunc(r.r.Devices, func(d Device) bool { return d.Volume == volume })
	switch {
	case creates(ev.Action):
		if i >= 0 {
			return Effect{}, &EventError{Field: "volume", Reason: fmt.Sprintf("%s device %d of %q, which the stream already announced", ev.Action, volume, r.r.Name)}
		}
		if len(r.r.Devices) >= MaxEventVolumes {
			return Effect{}, &EventError{Field: "volume", Reason: fmt.Sprintf("a device of %q more than the %d volumes this parser keeps", r.r.Name, MaxEventVolumes)}
		}
		if err := s.room(ObjectDevice); err != nil {
			return Effect{}, err
		}
		// A device line that names no quorum counts as having it: a DRBD without quorum
		// support has none to lose.
		d := Device{Volume: volume, Quorum: true}
		if err := setDevice(f, &d); err != nil {
			return Effect{}, err
		}
		r.r.Devices = append(r.r.Devices, d)
		slices.SortStableFunc(r.r.Devices, func(a, b Device) int { return a.Volume - b.Volume })
		s.objects++
		return Effect{Significant: true}, nil
	case i < 0:
		return Effect{}, &EventError{Field: "volume", Reason: fmt.Sprintf("%s device %d of %q, which the stream did not announce", ev.Action, volume, r.r.Name)}
	case ev.Action == EventDestroy:
		r.r.Devices = slices.Delete(r.r.Devices, i, i+1)
		s.objects--
		return Effect{Significant: true}, nil
	case ev.Action != EventChange:
		return Effect{}, &EventError{Field: "action", Reason: fmt.Sprintf("%s of a device", ev.Action)}
	}
	d := r.r.Devices[i]
	if err := setDevice(f, &d); err != nil {
		return Effect{}, err
	}
	before := r.r.Devices[i]
	r.r.Devices[i] = d
	return Effect{Significant: before.DiskState != d.DiskState || before.Client != d.Client || before.Quorum != d.Quorum}, nil
}

func setDevice(f fieldsOf, d *Device) error {
	if _, ok := f.ev.Value("minor"); ok {
		minor, err := f.integer("minor", math.MaxInt32)
		if err != nil {
			return err
		}
		d.Minor = minor
	}
	f.text("disk", &d.DiskState)
	if err := f.yesNo("client", &d.Client); err != nil {
		return err
	}
	if err := f.yesNo("quorum", &d.Quorum); err != nil {
		return err
	}
	for key, dst := range map[string]**uint64{"size": &d.SizeKiB, "read": &d.ReadKiB, "written": &d.WrittenKiB} {
		var n uint64
		ok, err := f.counter(key, &n)
		if err != nil {
			return err
		}
		if ok {
			*dst = &n
		}
	}
	return nil
}

// connectionIndex is the index of the connection named name in r's, -1 when none is.
func connectionIndex(r *eventResource, name string) int {
	return slices.IndexFunc(r.r.Connections, func(c Connection) bool { return c.Name == name })
}

// connectionOf reads what a connection's and a peer device's lines both name: the resource,
// the connection (conn-name) and the peer's node ID.
func (s *Events2) connectionOf(f fieldsOf) (r *eventResource, name string, peer int, err error) {
	if r, err = s.lookup(f); err != nil {
		return nil, "", 0, err
	}
	if name, err = f.required("conn-name"); err != nil {
		return nil, "", 0, err
	}
	if peer, err = f.integer("peer-node-id", MaxEventConnections); err != nil {
		return nil, "", 0, err
	}
	return r, name, peer, nil
}

func (s *Events2) applyConnection(ev Event) (Effect, error) {
	f := fieldsOf{ev}
	r, name, peer, err := s.connectionOf(f)
	if err != nil {
		return Effect{}, err
	}
	i := connectionIndex(r, name)
	switch {
	case creates(ev.Action):
		if i >= 0 {
			return Effect{}, &EventError{Field: "conn-name", Reason: fmt.Sprintf("%s connection %q of %q, which the stream already announced", ev.Action, clipText(name), r.r.Name)}
		}
		if len(r.r.Connections) >= MaxEventConnections {
			return Effect{}, &EventError{Field: "conn-name", Reason: fmt.Sprintf("a connection of %q more than the %d DRBD has", r.r.Name, MaxEventConnections)}
		}
		if err := s.room(ObjectConnection); err != nil {
			return Effect{}, err
		}
		c := Connection{PeerNodeID: peer, Name: name, PeerDevices: []PeerDevice{}}
		f.text("connection", &c.ConnectionState)
		f.text("role", &c.PeerRole)
		r.r.Connections = append(r.r.Connections, c)
		r.resyncSuspended[name] = map[int]string{}
		s.objects++
		return Effect{Significant: true}, nil
	case i < 0:
		return Effect{}, &EventError{Field: "conn-name", Reason: fmt.Sprintf("%s connection %q of %q, which the stream did not announce", ev.Action, clipText(name), r.r.Name)}
	case ev.Action == EventDestroy:
		s.objects -= 1 + len(r.r.Connections[i].PeerDevices)
		r.r.Connections = slices.Delete(r.r.Connections, i, i+1)
		delete(r.resyncSuspended, name)
		return Effect{Significant: true}, nil
	case ev.Action != EventChange:
		return Effect{}, &EventError{Field: "action", Reason: fmt.Sprintf("%s of a connection", ev.Action)}
	}
	c := &r.r.Connections[i]
	c.PeerNodeID = peer
	changed := f.text("connection", &c.ConnectionState)
	changed = f.text("role", &c.PeerRole) || changed
	return Effect{Significant: changed}, nil
}

func (s *Events2) applyPeerDevice(ev Event) (Effect, error) {
	f := fieldsOf{ev}
	r, name, _, err := s.connectionOf(f)
	if err != nil {
		return Effect{}, err
	}
	volume, err := f.integer("volume", 65535)
	if err != nil {
		return Effect{}, err
	}
	ci := connectionIndex(r, name)
	if ci < 0 {
		return Effect{}, &EventError{Field: "conn-name", Reason: fmt.Sprintf("%s peer-device of connection %q of %q, which the stream did not announce", ev.Action, clipText(name), r.r.Name)}
	}
	c := &r.r.Connections[ci]
	i := slices.IndexFunc(c.PeerDevices, func(p PeerDevice) bool { return p.Volume == volume })
	flags := r.resyncSuspended[name]
	switch {
	case creates(ev.Action):
		if i >= 0 {
			return Effect{}, &EventError{Field: "volume", Reason: fmt.Sprintf("%s peer-device %d of %q towards %q, which the stream already announced", ev.Action, volume, r.r.Name, clipText(name))}
		}
		if len(c.PeerDevices) >= MaxEventVolumes {
			return Effect{}, &EventError{Field: "volume", Reason: fmt.Sprintf("a peer device of %q more than the %d volumes this parser keeps", r.r.Name, MaxEventVolumes)}
		}
		if err := s.room(ObjectPeerDevice); err != nil {
			return Effect{}, err
		}
		p := PeerDevice{Volume: volume}
		flag := ""
		if err := setPeerDevice(f, &p, &flag); err != nil {
			return Effect{}, err
		}
		c.PeerDevices = append(c.PeerDevices, p)
		slices.SortStableFunc(c.PeerDevices, func(a, b PeerDevice) int { return a.Volume - b.Volume })
		flags[volume] = flag
		s.objects++
		return Effect{Significant: true}, nil
	case i < 0:
		return Effect{}, &EventError{Field: "volume", Reason: fmt.Sprintf("%s peer-device %d of %q towards %q, which the stream did not announce", ev.Action, volume, r.r.Name, clipText(name))}
	case ev.Action == EventDestroy:
		c.PeerDevices = slices.Delete(c.PeerDevices, i, i+1)
		delete(flags, volume)
		s.objects--
		return Effect{Significant: true}, nil
	case ev.Action != EventChange:
		return Effect{}, &EventError{Field: "action", Reason: fmt.Sprintf("%s of a peer device", ev.Action)}
	}
	p, flag := c.PeerDevices[i], flags[volume]
	if err := setPeerDevice(f, &p, &flag); err != nil {
		return Effect{}, err
	}
	before := c.PeerDevices[i]
	significant := before.ReplicationState != p.ReplicationState || before.PeerDiskState != p.PeerDiskState ||
		before.PeerClient != p.PeerClient || flags[volume] != flag
	c.PeerDevices[i], flags[volume] = p, flag
	return Effect{Significant: significant}, nil
}

// setPeerDevice reads a peer device's line. drbdsetup prints the statistics (received, sent,
// out-of-sync, done) as one block whenever they changed: out-of-sync only when it is not 0,
// done only while a resync or verify runs. So a line with the block ("received") and without
// out-of-sync or done says they are 0 and none.
func setPeerDevice(f fieldsOf, p *PeerDevice, flag *string) error {
	f.text("replication", &p.ReplicationState)
	f.text("peer-disk", &p.PeerDiskState)
	if err := f.yesNo("peer-client", &p.PeerClient); err != nil {
		return err
	}
	f.text("resync-suspended", flag)
	_, statistics := f.ev.Value("received")
	var oos uint64
	ok, err := f.counter("out-of-sync", &oos)
	if err != nil {
		return err
	}
	if ok || statistics {
		p.OutOfSyncKiB = oos
	}
	if v, ok := f.ev.Value("done"); ok {
		done, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(done) || math.IsInf(done, 0) {
			return &EventError{Field: "done", Reason: fmt.Sprintf("want a finite number, got %q", clipText(v))}
		}
		p.ResyncDonePercent = &done
	} else if statistics {
		p.ResyncDonePercent = nil
	}
	return nil
}

// Resources is the state as ParseStatus gives it: the resources by name, each one's devices
// and peer devices by volume, its connections in the order announced. The result is a copy.
func (s *Events2) Resources() []Resource {
	out := make([]Resource, 0, len(s.resources))
	for _, name := range slices.Sorted(maps.Keys(s.resources)) {
		r := s.resources[name].r
		r.Devices = slices.Clone(r.Devices)
		for i := range r.Devices {
			d := &r.Devices[i]
			d.SizeKiB, d.ReadKiB, d.WrittenKiB = clonePtr(d.SizeKiB), clonePtr(d.ReadKiB), clonePtr(d.WrittenKiB)
		}
		r.Connections = slices.Clone(r.Connections)
		for i := range r.Connections {
			c := &r.Connections[i]
			c.PeerDevices = slices.Clone(c.PeerDevices)
			for j := range c.PeerDevices {
				c.PeerDevices[j].ResyncDonePercent = clonePtr(c.PeerDevices[j].ResyncDonePercent)
			}
		}
		out = append(out, r)
	}
	return out
}

// ResyncSuspended is the pause flags of resource's volume towards peer, as drbdsetup prints
// them ("no", "user", "peer", "dependency", joined by commas); "" when not announced.
func (s *Events2) ResyncSuspended(resource, peer string, volume int) string {
	if r := s.resources[resource]; r != nil {
		return r.resyncSuspended[peer][volume]
	}
	return ""
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
