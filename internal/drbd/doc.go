// Package drbd is what the node agent knows about DRBD 9: it reads the state the kernel reports
// through `drbdsetup status --json`, and it builds the drbdadm command lines of the typed
// operations a NodeOperation may ask for (pause and resume a resynchronisation, adjust, verify).
//
// The agent never edits DRBD's configuration: LINSTOR writes the resource files, and drbdadm
// reads them. Every command is an argv run without a shell, and every name in it is checked
// first, so nothing a NodeOperation carries can reach drbdadm as an option or as one of the
// words drbdadm gives a meaning of its own ("all", "minor-<n>").
package drbd
