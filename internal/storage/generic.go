package storage

// Generic is any CSI driver Nodewright does not know. It claims nothing: an operation that
// needs a capability is refused on it rather than attempted on a guess.
type Generic struct {
	// Provisioner is the driver's name.
	Provisioner string
}

func (g Generic) Name() string                { return "generic CSI (" + g.Provisioner + ")" }
func (Generic) SupportsSnapshot() bool        { return false }
func (Generic) SupportsClone() bool           { return false }
func (Generic) SupportsRWXBlock() bool        { return false }
func (Generic) SupportsOnlineExpansion() bool { return false }
