package linstorsim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// propScope is where a property is set.
type propScope int

const (
	onController propScope = iota
	onGroup
	onDefinition
)

// knownProps are the properties the stand-in accepts, with what LINSTOR accepts as their
// value. LINSTOR refuses a key outside its whitelist; the stand-in's whitelist is these keys
// and the free Aux/ namespace, so a request for any other key is refused here even where
// LINSTOR would take it (and the test then says which).
var knownProps = map[string]struct {
	scopes []propScope
	valid  func(string) bool
	values string
}{
	"DrbdOptions/Resource/quorum": {
		scopes: []propScope{onController, onGroup, onDefinition},
		valid: func(v string) bool {
			if v == "off" || v == "majority" || v == "all" {
				return true
			}
			n, err := strconv.Atoi(v)
			return err == nil && n >= 1 && n <= 32
		},
		values: "off, majority, all or 1-32",
	},
	"DrbdOptions/Resource/on-no-quorum": {
		scopes: []propScope{onController, onGroup, onDefinition},
		valid:  func(v string) bool { return v == "io-error" || v == "suspend-io" },
		values: "io-error or suspend-io",
	},
	"DrbdOptions/auto-add-quorum-tiebreaker": {
		scopes: []propScope{onController, onGroup, onDefinition},
		valid:  isBool,
		values: "true or false",
	},
	"BalanceResourcesEnabled": {
		scopes: []propScope{onController},
		valid:  isBool,
		values: "true or false",
	},
	"BalanceResourcesInterval": {
		scopes: []propScope{onController},
		valid: func(v string) bool {
			n, err := strconv.ParseInt(v, 10, 64)
			return err == nil && n > 0
		},
		values: "a number of seconds above 0",
	},
}

func isBool(v string) bool { return v == "true" || v == "false" }

// drbdHandlers are DRBD's handlers (drbd.conf(5), the handlers section), which LINSTOR takes
// as DrbdOptions/Handlers/<handler> on the controller, a resource group or a definition and
// writes into the resource files: drbdadm runs each as root on the node when its event comes.
// The stand-in accepts them as LINSTOR does, so that a test can show what reaches LINSTOR.
var drbdHandlers = []string{
	"after-resync-target", "before-resync-source", "before-resync-target", "disconnected",
	"fence-peer", "initial-split-brain", "local-io-error", "out-of-sync", "pri-lost",
	"pri-lost-after-sb", "pri-on-incon-degr", "quorum-lost", "split-brain", "unfence-peer",
}

func init() {
	for _, h := range drbdHandlers {
		knownProps["DrbdOptions/Handlers/"+h] = struct {
			scopes []propScope
			valid  func(string) bool
			values string
		}{scopes: []propScope{onController, onGroup, onDefinition}, valid: func(v string) bool { return v != "" }, values: "a command"}
	}
}

// propsModify is the body of every properties modify (ControllerPropsModify and the props of
// ResourceGroupModify, ResourceDefinitionModify).
type propsModify struct {
	OverrideProps    map[string]string `json:"override_props"`
	DeleteProps      []string          `json:"delete_props"`
	DeleteNamespaces []string          `json:"delete_namespaces"`
}

// checkProps answers what LINSTOR would refuse in a properties modify; empty when it is fine.
func checkProps(m propsModify, scope propScope, objMask int64) answer {
	var a answer
	keys := make([]string, 0, len(m.OverrideProps))
	for k := range m.OverrideProps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		value := m.OverrideProps[key]
		if strings.HasPrefix(key, "Aux/") && len(key) > len("Aux/") {
			continue
		}
		known, ok := knownProps[key]
		if !ok || !containsScope(known.scopes, scope) {
			rc := a.add(maskError|objMask|maskMod|codeInvldProp, fmt.Sprintf("The key '%s' is not whitelisted.", key))
			rc.Correction = "Use a key LINSTOR knows for this object, or one in the Aux/ namespace."
			continue
		}
		if !known.valid(value) {
			rc := a.add(maskError|objMask|maskMod|codeInvldProp, fmt.Sprintf("The value '%s' is not valid for the key '%s'.", value, key))
			rc.Correction = "Valid values: " + known.values + "."
		}
	}
	return a
}

func containsScope(list []propScope, s propScope) bool {
	for _, item := range list {
		if item == s {
			return true
		}
	}
	return false
}

// apply changes props as a checked modify asks: deletions first, then overrides.
func (m propsModify) apply(props map[string]string) {
	for _, ns := range m.DeleteNamespaces {
		prefix := strings.TrimSuffix(ns, "/") + "/"
		for k := range props {
			if strings.HasPrefix(k, prefix) {
				delete(props, k)
			}
		}
	}
	for _, k := range m.DeleteProps {
		delete(props, k)
	}
	for k, v := range m.OverrideProps {
		props[k] = v
	}
}
