//go:build nodewright_site

package main

import (
	"flag"

	"github.com/spectrocloud/nodewright/internal/netconf"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// In a build for the local site (go build -tags nodewright_site), the agent can run on the
// site's played bond (test/site/netsite): --network-backend site --site-bond-dir DIR.
func init() {
	dir := flag.String("site-bond-dir", "", "With --network-backend site: the directory of the node's played bond.")
	backends["site"] = func() netconf.Backend { return netsite.PlayedBond{Dir: *dir} }
}
