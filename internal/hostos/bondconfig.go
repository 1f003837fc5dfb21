package hostos

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// A bond's mode outlives a reboot in the host's network configuration. Nodewright writes the
// least it can: the mode, as a systemd-networkd drop-in for the .netdev file that defines the
// bond, so that whoever installed the node keeps owning the rest (members, addresses, VLANs).
// Where no .netdev file defines the bond, it writes one that does, holding only the bond's name,
// kind and mode. On Kairos, where /etc is rebuilt on every boot, the same drop-in is written by
// a cloud-config file in /oem at the initramfs stage, before networkd starts. Talos refuses:
// its bond is machine.network in the machine config, changed only through the Talos API.

// BondConfig is the persistent configuration of a bond's mode.
type BondConfig struct {
	// Bond is the bond's name.
	Bond string
	// Mode is its mode.
	Mode nwv1.BondMode
	// BaseNetdev is the name of the .netdev file that defines the bond in the network
	// directory; "" when none does.
	BaseNetdev string
}

// File is one host file, its path absolute on the host.
type File struct {
	Path    string
	Content []byte
}

// ErrUnsupported says the OS keeps its network configuration where the agent does not write.
var ErrUnsupported = errors.New("the host OS's persistent network configuration cannot be changed by the agent")

const header = "# Written by the Nodewright agent for a SetBondMode NodeOperation; it is changed and\n# removed only through NodeOperations.\n"

// networkDir is where systemd-networkd reads its administrator's files; Nodewright writes
// there, a drop-in for a .netdev of any of networkd's directories included.
const networkDir = "/etc/systemd/network"

// BondFiles renders cfg as p persists it: the files to write, with absolute host paths.
func BondFiles(p Provider, cfg BondConfig) ([]File, error) {
	if err := checkName(cfg.Bond); err != nil {
		return nil, err
	}
	nc := p.PersistentNetworkConfig()
	if !nc.Supported || nc.Mechanism != MechanismSystemdNetworkd {
		return nil, fmt.Errorf("%w: on %s the bond's mode is kept in %s (%s)", ErrUnsupported, p.Name(), nc.Path, nc.Mechanism)
	}
	netdev := networkdFile(cfg)
	if nc.CloudConfigStage == "" {
		return []File{netdev}, nil
	}
	// A cloud-config file in Path writes the networkd file at the stage, on every boot.
	doc := cloudConfig{Name: "Nodewright: the mode of bond " + cfg.Bond, Stages: map[string][]stage{
		nc.CloudConfigStage: {{Name: "Nodewright: the mode of bond " + cfg.Bond, Files: []yipFile{{
			Path: netdev.Path, Permissions: 0o644, Content: string(netdev.Content),
		}}}},
	}}
	body, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return []File{{
		Path:    path.Join(nc.Path, "90_nodewright_bond_"+cfg.Bond+".yaml"),
		Content: append([]byte("#cloud-config\n"+header), body...),
	}}, nil
}

// networkdFile is the drop-in that sets the mode, or the .netdev that defines the bond.
func networkdFile(cfg BondConfig) File {
	if cfg.BaseNetdev != "" {
		return File{
			Path:    path.Join(networkDir, cfg.BaseNetdev+".d", "90-nodewright-mode.conf"),
			Content: []byte(header + "[Bond]\nMode=" + string(cfg.Mode) + "\n"),
		}
	}
	return File{
		Path:    path.Join(networkDir, "10-nodewright-"+cfg.Bond+".netdev"),
		Content: []byte(header + "[NetDev]\nName=" + cfg.Bond + "\nKind=bond\n\n[Bond]\nMode=" + string(cfg.Mode) + "\n"),
	}
}

// cloudConfig is the part of a Kairos (yip) cloud-config file Nodewright writes.
type cloudConfig struct {
	Name   string             `json:"name"`
	Stages map[string][]stage `json:"stages"`
}

type stage struct {
	Name  string    `json:"name"`
	Files []yipFile `json:"files"`
}

type yipFile struct {
	Path        string `json:"path"`
	Permissions uint32 `json:"permissions"`
	Content     string `json:"content"`
}

// ParseBondFiles reads a bond's mode back from files BondFiles rendered for p.
func ParseBondFiles(p Provider, files []File) (nwv1.BondMode, error) {
	if len(files) != 1 {
		return "", fmt.Errorf("want one file, got %d", len(files))
	}
	content := files[0].Content
	if nc := p.PersistentNetworkConfig(); nc.CloudConfigStage != "" {
		var doc cloudConfig
		if err := yaml.UnmarshalStrict(content, &doc); err != nil {
			return "", fmt.Errorf("%s: %w", files[0].Path, err)
		}
		steps := doc.Stages[nc.CloudConfigStage]
		if len(steps) != 1 || len(steps[0].Files) != 1 {
			return "", fmt.Errorf("%s: want one file in stage %s", files[0].Path, nc.CloudConfigStage)
		}
		content = []byte(steps[0].Files[0].Content)
	}
	sections, err := ParseNetworkd(content)
	if err != nil {
		return "", fmt.Errorf("%s: %w", files[0].Path, err)
	}
	modes := sections["Bond"]["Mode"]
	if len(modes) == 0 {
		return "", fmt.Errorf("%s: no Mode in a [Bond] section", files[0].Path)
	}
	return nwv1.BondMode(modes[len(modes)-1]), nil
}

// ParseNetworkd reads a systemd unit-style file (a .netdev, .network or drop-in): sections
// of Key=Value lines, comments starting with # or ;. A key may repeat; its values are kept in
// order. Line continuations are not supported and are refused.
func ParseNetworkd(content []byte) (map[string]map[string][]string, error) {
	sections := map[string]map[string][]string{}
	current := ""
	sc := bufio.NewScanner(bytes.NewReader(content))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasSuffix(line, "\\"):
			return nil, fmt.Errorf("line %d: continued lines are not supported", n)
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") || len(line) < 3 {
				return nil, fmt.Errorf("line %d: %q is not a section header", n, line)
			}
			current = line[1 : len(line)-1]
			if sections[current] == nil {
				sections[current] = map[string][]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			key = strings.TrimSpace(key)
			if !ok || key == "" {
				return nil, fmt.Errorf("line %d: %q is not Key=Value", n, line)
			}
			if current == "" {
				return nil, fmt.Errorf("line %d: %s outside any section", n, key)
			}
			sections[current][key] = append(sections[current][key], strings.TrimSpace(value))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return sections, nil
}

// networkdDirs are where systemd-networkd reads its files (systemd.network(5)): together,
// sorted by file name, a file in an earlier directory hiding one of the same name in a later.
var networkdDirs = []string{"/etc/systemd/network", "/run/systemd/network", "/usr/local/lib/systemd/network", "/usr/lib/systemd/network"}

// FindBondNetdev finds the .netdev file that defines the bond called name (Kind=bond) among
// networkd's directories under root, as networkd reads them: by file name across the
// directories, /etc first for a name found twice; the first that defines the bond is the one
// networkd uses (it ignores a later definition of the same device). It returns the file's name,
// "" when none defines it. Nodewright's own 10-nodewright-<bond>.netdev is passed over.
func FindBondNetdev(root, name string) (string, error) {
	seen := map[string]string{} // file name -> its path, the first directory's
	var names []string
	for _, dir := range networkdDirs {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".netdev") || strings.HasPrefix(n, "10-nodewright-") {
				continue
			}
			if _, ok := seen[n]; !ok {
				seen[n] = filepath.Join(root, dir, n)
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	for _, n := range names {
		content, err := os.ReadFile(seen[n])
		if err != nil {
			return "", err
		}
		sections, err := ParseNetworkd(content)
		if err != nil {
			continue // networkd would ignore it too
		}
		nd := sections["NetDev"]
		if last(nd["Name"]) == name && last(nd["Kind"]) == "bond" {
			return n, nil
		}
	}
	return "", nil
}

func last(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[len(values)-1]
}

func checkName(bond string) error {
	if bond == "" || len(bond) > 15 || strings.ContainsAny(bond, "/ \n\t\\") || bond == "." || bond == ".." {
		return fmt.Errorf("bond name %q: not a Linux interface name", bond)
	}
	return nil
}

// ReadFiles reads the current content of files' paths under root: a path that does not exist
// gets nil content. It is what a checkpoint keeps to restore.
func ReadFiles(root string, files []File) ([]File, error) {
	var out []File
	for _, f := range files {
		content, err := os.ReadFile(filepath.Join(root, f.Path))
		if errors.Is(err, fs.ErrNotExist) {
			out = append(out, File{Path: f.Path})
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, File{Path: f.Path, Content: content})
	}
	return out, nil
}

// WriteFiles writes files under root, each atomically (a temporary file renamed over it, both
// synced); a file with nil content is removed.
func WriteFiles(root string, files []File) error {
	for _, f := range files {
		p := filepath.Join(root, f.Path)
		if f.Content == nil {
			err := os.Remove(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err == nil {
				err = syncDir(filepath.Dir(p))
			}
			if err != nil {
				return err
			}
			continue
		}
		if err := WriteFileAtomic(p, f.Content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic writes content to p through a temporary file in the same directory, synced
// and renamed over p, then syncs the directory: after a crash p holds the old or the new
// content, never part of either.
func WriteFileAtomic(p string, content []byte, perm os.FileMode) error {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.Write(content)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename or a removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
