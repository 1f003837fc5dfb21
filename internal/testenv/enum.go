package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// EnumValues is every value the API admits for a string type of api/v1alpha1: its
// +kubebuilder:validation:Enum marker, which must name exactly the type's constants. It is
// read from the source so that a value added to the API fails the tests until it is mapped.
func EnumValues(t testing.TB, typeName string) []string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "api", "v1alpha1", "*_types.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("finding api/v1alpha1: %v (%d files)", err, len(files))
	}
	var marker, consts []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gen.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					if spec.Name.Name == typeName && gen.Doc != nil {
						for _, c := range gen.Doc.List {
							if v, ok := strings.CutPrefix(c.Text, "// +kubebuilder:validation:Enum="); ok {
								marker = strings.Split(v, ";")
							}
						}
					}
				case *ast.ValueSpec:
					if id, ok := spec.Type.(*ast.Ident); !ok || id.Name != typeName {
						continue
					}
					for _, v := range spec.Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok {
							t.Fatalf("a %s constant is not a string literal", typeName)
						}
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						consts = append(consts, s)
					}
				}
			}
		}
	}
	if len(marker) == 0 {
		t.Fatalf("no +kubebuilder:validation:Enum marker on %s in api/v1alpha1", typeName)
	}
	if !slices.Equal(slices.Sorted(slices.Values(marker)), slices.Sorted(slices.Values(consts))) {
		t.Fatalf("%s: the Enum marker admits %v but the constants are %v", typeName, marker, consts)
	}
	return marker
}
