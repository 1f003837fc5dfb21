package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestSetDigestsKeepsCommentsAndEveryOtherValue(t *testing.T) {
	const values = `# top comment
image:
  # -- the repository
  repository: example/operator
  digest: ""
copyImage:
  repository: example/copy
  digest: "" # inline
linstor:
  url: ""
  gate:
    image:
      digest: ""
agent:
  enabled: true
  image:
    # -- the agent's
    digest: ""
other: {a: 1}
`
	d1 := "sha256:" + strings.Repeat("a", 64)
	d2 := "sha256:" + strings.Repeat("b", 64)
	d3 := "sha256:" + strings.Repeat("c", 64)
	d4 := "sha256:" + strings.Repeat("d", 64)
	out, err := setDigests([]byte(values), map[string]string{"image": d1, "copyImage": d2, "agent.image": d3, "linstor.gate.image": d4})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# top comment", "# -- the repository", "# inline", "# -- the agent's"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("comment %q lost:\n%s", want, out)
		}
	}
	var got map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	var wantV map[string]any
	if err := yaml.Unmarshal([]byte(values), &wantV); err != nil {
		t.Fatal(err)
	}
	wantV["image"].(map[string]any)["digest"] = d1
	wantV["copyImage"].(map[string]any)["digest"] = d2
	wantV["agent"].(map[string]any)["image"].(map[string]any)["digest"] = d3
	wantV["linstor"].(map[string]any)["gate"].(map[string]any)["image"].(map[string]any)["digest"] = d4
	gotJSON, _ := yaml.Marshal(got)
	wantJSON, _ := yaml.Marshal(wantV)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("values after setting the digests:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}
}

func TestSetDigestsNamesWhatIsMissing(t *testing.T) {
	for values, want := range map[string]string{
		"image: {digest: x}\nagent: {image: {digest: x}}\n":                "no copyImage mapping",
		"image: {}\ncopyImage: {digest: x}\nagent: {image: {digest: x}}\n": "no image.digest",
		"- a list\n": "not a mapping",
		"image: plain\ncopyImage: {digest: x}\nagent: {image: {digest: x}}\n":  "no image mapping",
		"image: {digest: x}\ncopyImage: {digest: x}\nagent: {enabled: true}\n": "no agent.image mapping",
	} {
		_, err := setDigests([]byte(values), map[string]string{"image": "d", "copyImage": "d", "agent.image": "d"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want %q", values, err, want)
		}
	}
}

// TestReadDigests: each chart's digests file gives exactly its images' digests; one of
// another chart (the member's digests.yaml given for the hub's chart) or a missing or bad one
// is refused, naming it.
func TestReadDigests(t *testing.T) {
	d := "sha256:" + strings.Repeat("e", 64)
	fleet := charts["nodewright-fleet"].images
	got, err := readDigests([]byte("# comment\nimage:\n  digest: "+d+"\n"), fleet)
	if err != nil || len(got) != 1 || got["image"] != d {
		t.Fatalf("fleet digests: %v, %v", got, err)
	}
	member := "image: {digest: " + d + "}\ncopyImage: {digest: " + d + "}\nlinstor: {gate: {image: {digest: " + d + "}}}\nagent: {image: {digest: " + d + "}}\n"
	if got, err := readDigests([]byte(member), charts["nodewright"].images); err != nil || len(got) != 4 {
		t.Fatalf("member digests: %v, %v", got, err)
	}
	for data, want := range map[string]string{
		member:                          "digests of images this chart does not have: agent.image, copyImage, linstor.gate.image",
		"image: {}\n":                   "no image.digest (nodewright-fleet's)",
		"image: {digest: sha256:abc}\n": `image.digest "sha256:abc" is not a sha256 digest`,
		"image: {digest: 1}\n":          "image.digest: not a digest",
		"image: {tag: v1}\n":            "image.tag: not a digest",
	} {
		if _, err := readDigests([]byte(data), fleet); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", data, err, want)
		}
	}
}
