// Command nodewright-profile checks, canonicalises, signs and verifies EdgeProfile files, with
// keys and signatures cosign reads and writes; see docs/profile.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spectrocloud/nodewright/internal/profile/profilecli"
)

const usage = `usage:
  nodewright-profile keygen    [--output-key-prefix PREFIX]
  nodewright-profile canonical FILE
  nodewright-profile digest    FILE
  nodewright-profile sign      --key PRIVATE-KEY [-w] FILE
  nodewright-profile verify    --key PUBLIC-KEY [--key PUBLIC-KEY]... FILE

An EdgeProfile is signed with a detached signature over the canonical encoding of its spec
(docs/profile.md), made and checked exactly as cosign sign-blob / verify-blob do with a key file.
FILE is a YAML or JSON EdgeProfile, or - for standard input; it is checked against the CRD's
rules before anything else.

  keygen     writes PREFIX.key (encrypted, as cosign writes it) and PREFIX.pub; PREFIX is
             "cosign" unless given. Never overwrites a file.
  canonical  prints the canonical encoding of the spec: the bytes the signature covers, with no
             newline after them.
  digest     prints sha256:<hex> of the canonical encoding.
  sign       prints the profile with its signature field filled in (comments and layout kept
             for a block-style YAML file), or with -w rewrites FILE.
  verify     checks the signature against the trusted public keys.

The password of a private key is read from $NODEWRIGHT_PROFILE_PASSWORD, or else
$COSIGN_PASSWORD (it may be empty); there is no prompt.

Exit status: 0 done (verify: the signature is valid); 1 the profile is invalid, unsigned, or its
signature does not verify; 2 a usage error (bad arguments, unreadable files, not a key).

Examples:
  export NODEWRIGHT_PROFILE_PASSWORD=...
  nodewright-profile keygen --output-key-prefix site-signing
  nodewright-profile sign --key site-signing.key -w munich.yaml
  nodewright-profile verify --key site-signing.pub munich.yaml

  # The same signature made and checked with cosign (offline, no transparency log):
  nodewright-profile canonical munich.yaml > munich.json
  cosign sign-blob --key cosign.key --tlog-upload=false munich.json
  #   ...and put the base64 it prints in munich.yaml as "signature: <base64>"
  cosign verify-blob --key cosign.pub --insecure-ignore-tlog=true \
    --signature "$(awk '/^signature:/ {print $2}' munich.yaml)" munich.json
`

func main() {
	os.Exit(run(os.Args[1:], profilecli.OSEnv()))
}

// run is the program minus process setup, so tests can drive it.
func run(args []string, env profilecli.Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "keygen":
		err = keygen(args[1:], env)
	case "canonical":
		err = oneFile("canonical", args[1:], env, profilecli.Canonical)
	case "digest":
		err = oneFile("digest", args[1:], env, profilecli.Digest)
	case "sign":
		err = sign(args[1:], env)
	case "verify":
		err = verify(args[1:], env)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(env.Stdout, usage)
		return 0
	default:
		fmt.Fprint(env.Stderr, usage)
		err = &profilecli.UsageError{Err: fmt.Errorf("unknown command %q", args[0])}
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "nodewright-profile %s: %s\n", args[0], profilecli.Describe(err))
	}
	return profilecli.ExitCode(err)
}

// repeated collects a flag given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func newFlagSet(name, synopsis string, env profilecli.Env) *flag.FlagSet {
	fs := flag.NewFlagSet("nodewright-profile "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nodewright-profile %s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse reads flags before and after the positional arguments (sign FILE --key K works too) and
// returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &profilecli.UsageError{Err: err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func onePositional(fs *flag.FlagSet, args []string) (string, error) {
	positional, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(positional) != 1 {
		fs.Usage()
		return "", &profilecli.UsageError{Err: fmt.Errorf("want one FILE, got %d arguments", len(positional))}
	}
	return positional[0], nil
}

func oneFile(name string, args []string, env profilecli.Env, do func(profilecli.Env, string) error) error {
	fs := newFlagSet(name, name+" FILE", env)
	file, err := onePositional(fs, args)
	if err != nil {
		return err
	}
	return do(env, file)
}

func keygen(args []string, env profilecli.Env) error {
	fs := newFlagSet("keygen", "keygen [--output-key-prefix PREFIX]", env)
	prefix := fs.String("output-key-prefix", "cosign", "write the keys to PREFIX.key and PREFIX.pub")
	positional, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 0 {
		fs.Usage()
		return &profilecli.UsageError{Err: fmt.Errorf("unexpected arguments %q", positional)}
	}
	return profilecli.Keygen(env, *prefix)
}

func sign(args []string, env profilecli.Env) error {
	fs := newFlagSet("sign", "sign --key PRIVATE-KEY [-w] FILE", env)
	key := fs.String("key", "", "the private key to sign with: cosign's encrypted key file, or an unencrypted PKCS#8 PEM key (required)")
	rewrite := fs.Bool("w", false, "write the signed profile back to FILE instead of the standard output")
	file, err := onePositional(fs, args)
	if err != nil {
		return err
	}
	return profilecli.Sign(env, file, *key, *rewrite)
}

func verify(args []string, env profilecli.Env) error {
	fs := newFlagSet("verify", "verify --key PUBLIC-KEY [--key PUBLIC-KEY]... FILE", env)
	var keys repeated
	fs.Var(&keys, "key", "a trusted public key file (PEM, as cosign.pub; may hold several keys); repeat for more (required)")
	file, err := onePositional(fs, args)
	if err != nil {
		return err
	}
	return profilecli.Verify(env, file, keys)
}
