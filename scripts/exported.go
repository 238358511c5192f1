//go:build ignore

// Exported counts the exported identifiers of packages: types, funcs,
// methods (of exported types, interface methods included), consts, vars
// and exported struct fields (of exported types), from the non-test files.
// An alias of a type of this module (type Entry = rcache.Entry) counts
// with the fields and methods it brings.
//
//	go run scripts/exported.go resilience resilience/httpx breaker cache lock fallback telemetry
//	go run scripts/exported.go -v lock      also lists the names
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list the names")
	flag.Parse()
	for _, dir := range flag.Args() {
		names, err := exported(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		kinds := map[string]int{}
		for _, n := range names {
			kinds[strings.Fields(n)[0]]++
		}
		fmt.Printf("%-18s %4d  (type %d, func %d, method %d, const %d, var %d, field %d)\n", dir, len(names),
			kinds["type"], kinds["func"], kinds["method"], kinds["const"], kinds["var"], kinds["field"])
		if *verbose {
			sort.Strings(names)
			for _, n := range names {
				fmt.Println("   ", n)
			}
		}
	}
}

func exported(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						names = append(names, "func "+d.Name.Name)
					} else if r := recvType(d.Recv.List[0].Type); ast.IsExported(r) {
						names = append(names, "method "+r+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							names = append(names, "type "+s.Name.Name)
							if s.Assign.IsValid() {
								brought, err := aliased(f, s)
								if err != nil {
									return nil, err
								}
								names = append(names, brought...)
							}
							switch t := s.Type.(type) {
							case *ast.StructType:
								for _, fl := range t.Fields.List {
									for _, n := range fl.Names {
										if n.IsExported() {
											names = append(names, "field "+s.Name.Name+"."+n.Name)
										}
									}
								}
							case *ast.InterfaceType:
								for _, m := range t.Methods.List {
									for _, n := range m.Names {
										if n.IsExported() {
											names = append(names, "method "+s.Name.Name+"."+n.Name)
										}
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									names = append(names, d.Tok.String()+" "+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return names, nil
}

const module = "github.com/herdguard/herdguard"

// aliased returns the exported fields and methods that the alias s, in
// file f, brings from a type of another package of this module, named as
// members of the alias.
func aliased(f *ast.File, s *ast.TypeSpec) ([]string, error) {
	t := s.Type
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	sel, ok := t.(*ast.SelectorExpr)
	if !ok {
		return nil, nil
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return nil, nil
	}
	for _, im := range f.Imports {
		path := strings.Trim(im.Path.Value, `"`)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		if name != pkg.Name || !strings.HasPrefix(path, module+"/") {
			continue
		}
		all, err := exported(strings.TrimPrefix(path, module+"/"))
		if err != nil {
			return nil, err
		}
		var out []string
		for _, n := range all {
			kind, member, _ := strings.Cut(n, " ")
			if (kind == "field" || kind == "method") && strings.HasPrefix(member, sel.Sel.Name+".") {
				out = append(out, kind+" "+s.Name.Name+strings.TrimPrefix(member, sel.Sel.Name))
			}
		}
		return out, nil
	}
	return nil, nil
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}
