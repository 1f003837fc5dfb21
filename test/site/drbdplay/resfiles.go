package drbdplay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The kernel follows the resource files of ConfigDir as the real module follows LINSTOR's
// satellite: a replica placed on the node is a new file (drbdadm adjust would bring the
// resource up), a replica moved or added elsewhere changes the file's hosts, a replica removed
// from the node removes the file.

// resFile is what the kernel last read of one resource file.
type resFile struct {
	mod  time.Time
	size int64
	// read is when it was read; hosts its on sections' hosts, nil when it could not be read or
	// parsed.
	read  time.Time
	hosts []string
	// diskless are the hosts whose volumes have no disk (disk none).
	diskless []string
}

// racyWindow is how long after a file's modification time a read of it is not trusted to
// have seen its last change: a file rewritten within the file system's timestamp granularity
// keeps its modification time (and maybe its size), so it is read again until its
// modification time is that much older than the last read.
const racyWindow = time.Second

// syncConfig makes the resources follow ConfigDir's resource files; the caller holds k.mu.
//
// A resource file names the resource after itself. One naming Self in its on sections holds
// the resource here, its peers the other hosts named: the resource is added, or its peers are
// changed (the links to peers that stay keep their state; a new peer's link starts fresh). One
// not naming Self is another node's: a resource a file had placed here is dropped, as it is when
// its file goes. A file that cannot be read or parsed changes nothing, and a resource no file
// ever placed (AddResource) stays as it is.
func (k *Kernel) syncConfig() {
	if k.ConfigDir == "" {
		return
	}
	entries, err := os.ReadDir(k.ConfigDir)
	if err != nil {
		return // a directory that cannot be listed says nothing of its files
	}
	if k.files == nil {
		k.files = map[string]*resFile{}
	}
	seen := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ResourceSuffix)
		if !ok || checkName(name) != nil || !e.Type().IsRegular() {
			continue
		}
		seen[name] = true
		f := k.readResFile(name, e)
		switch {
		case f.hosts == nil:
		case slices.Contains(f.hosts, k.Self):
			k.placeFromFile(name, f.hosts, f.diskless)
		default:
			k.dropFromFile(name)
		}
	}
	for name := range k.files {
		if !seen[name] {
			delete(k.files, name)
			k.dropFromFile(name)
		}
	}
}

// readResFile is the file of resource name, read again only when it may have changed.
func (k *Kernel) readResFile(name string, e os.DirEntry) *resFile {
	info, err := e.Info()
	if err != nil {
		return &resFile{} // gone since the listing: the next one says so
	}
	if f := k.files[name]; f != nil && f.mod.Equal(info.ModTime()) && f.size == info.Size() && f.read.Sub(f.mod) > racyWindow {
		return f
	}
	f := &resFile{mod: info.ModTime(), size: info.Size(), read: time.Now()}
	if raw, err := os.ReadFile(filepath.Join(k.ConfigDir, e.Name())); err == nil {
		f.hosts, f.diskless, _ = onSections(raw)
	}
	k.files[name] = f
	return f
}

// placeFromFile holds the resource name here, with the peers hosts but Self, those of diskless
// without a disk.
func (k *Kernel) placeFromFile(name string, hosts, diskless []string) {
	if k.resources == nil {
		k.resources = map[string]*resource{}
	}
	r := k.resources[name]
	if r == nil {
		r = &resource{links: map[string]*link{}}
		k.resources[name] = r
	}
	r.fromFile = true
	r.diskless = map[string]bool{}
	for _, h := range diskless {
		r.diskless[h] = true
	}
	want := slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { return h == k.Self })
	slices.Sort(want)
	want = slices.Compact(want)
	// Peers that stay keep their place (and node id in the status); new ones follow, by name.
	peers := slices.DeleteFunc(slices.Clone(r.peers), func(p string) bool { return !slices.Contains(want, p) })
	for _, p := range want {
		if !slices.Contains(peers, p) {
			peers = append(peers, p)
			r.links[p] = &link{}
		}
	}
	for p := range r.links {
		if !slices.Contains(peers, p) {
			delete(r.links, p)
		}
	}
	r.peers = peers
}

// dropFromFile drops the resource name if a resource file placed it.
func (k *Kernel) dropFromFile(name string) {
	if r := k.resources[name]; r != nil && r.fromFile {
		delete(k.resources, name)
	}
}

// onSections lists the hosts of a resource file's on sections (`on "<host>" {` as LINSTOR
// writes them, or any form drbd.conf(5) allows: unquoted, several hosts), and those of them
// whose section gives a volume no disk (`disk none;`). A file cut short (its braces or quotes
// unbalanced) or naming no host is an error.
func onSections(raw []byte) (hosts, diskless []string, err error) {
	toks, err := tokens(string(raw))
	if err != nil {
		return nil, nil, err
	}
	depth := 0
	// section are the hosts of the on section the tokens are in, nil outside one.
	var section []string
	for i := 0; i < len(toks); i++ {
		switch t := toks[i]; {
		case t.is("{"):
			depth++
		case t.is("}"):
			if depth--; depth < 0 {
				return nil, nil, errors.New("a } closes no section")
			}
			if depth == 1 {
				section = nil
			}
		case t.is("disk") && section != nil && i+1 < len(toks) && toks[i+1].is("none"):
			diskless = append(diskless, section...)
		case t.is("on") && depth == 1 && (i == 0 || toks[i-1].is("{") || toks[i-1].is("}") || toks[i-1].is(";")):
			j := i + 1
			var names []string
			for ; j < len(toks) && !toks[j].is("{"); j++ {
				if toks[j].is("}") || toks[j].is(";") || toks[j].text == "" {
					return nil, nil, fmt.Errorf("an on section is cut short at %q", toks[j].text)
				}
				names = append(names, toks[j].text)
			}
			if j == i+1 || j == len(toks) {
				return nil, nil, errors.New("an on section names no host or has no body")
			}
			hosts, section = append(hosts, names...), names
			i = j - 1
		}
	}
	if depth != 0 {
		return nil, nil, errors.New("the file ends inside a section")
	}
	if len(hosts) == 0 {
		return nil, nil, errors.New("no on section names a host")
	}
	return hosts, slices.Compact(diskless), nil
}

// token is a word of the configuration: a quoted string, a brace, a semicolon, or a run of
// anything else.
type token struct {
	text   string
	quoted bool
}

// is reports whether the token is the unquoted word w.
func (t token) is(w string) bool { return !t.quoted && t.text == w }

// tokens splits a configuration into its words, without comments (# to the end of the line).
func tokens(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '{' || c == '}' || c == ';':
			out = append(out, token{text: string(c)})
			i++
		case c == '"':
			var b strings.Builder
			for i++; ; i++ {
				if i >= len(s) {
					return nil, errors.New("a quoted string is not closed")
				}
				if s[i] == '\\' && i+1 < len(s) {
					i++
				} else if s[i] == '"' {
					break
				}
				b.WriteByte(s[i])
			}
			out = append(out, token{text: b.String(), quoted: true})
			i++
		case isSpace(c):
			i++
		default:
			j := i
			for j < len(s) && !strings.ContainsRune("{};\"#", rune(s[j])) && !isSpace(s[j]) {
				j++
			}
			out = append(out, token{text: s[i:j]})
			i = j
		}
	}
	return out, nil
}

func isSpace(c byte) bool { return strings.IndexByte(" \t\n\r\v\f", c) >= 0 }
