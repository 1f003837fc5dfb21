package ociimage

import (
	"io/fs"
	"path"
)

// The image's user: the binaries run as nonroot (65532:65532, the uid and gid distroless
// images use) unless a pod says otherwise. The nodewright-copy Jobs run it as root (uid 0)
// to open the block devices, which is why root is in /etc/passwd too.
const (
	NonrootUID  = 65532
	NonrootGID  = 65532
	NonrootName = "nonroot"
	NonrootHome = "/home/nonroot"
	// User is the config's User: "65532:65532".
	User = "65532:65532"
	// BinDir is where the binary goes: on PATH, since the migration Jobs run the copier
	// by name ("nodewright-copy"), not by path.
	BinDir = "/usr/local/bin"
	// PATH is the config's only environment variable.
	PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Passwd is the image's /etc/passwd: root and nonroot, neither with a login shell (the image
// has none). nonroot's home directory is not created: nothing in the binaries writes to $HOME.
const Passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
	"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"

// Group is the image's /etc/group.
const Group = "root:x:0:\n" +
	"nonroot:x:65532:\n"

// BaseFiles is the minimal base every image gets, assembled here rather than pulled from
// a registry: /etc/passwd and /etc/group (so the uid 65532 and 0 have names, which some
// libraries look up), and an empty /tmp (mode 1777) for the rare temporary file.
// Directories such as /etc are added by NewLayer.
func BaseFiles() []File {
	return []File{
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(Passwd)},
		{Name: "etc/group", Mode: 0o644, Data: []byte(Group)},
		{Name: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
}

// BinaryPath is where the binary name goes in the image, such as /usr/local/bin/operator.
func BinaryPath(name string) string {
	return path.Join(BinDir, name)
}
