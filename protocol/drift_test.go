package protocol

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
)

// These tests keep docs/protocol.md and server/openapi.json in step with
// this package: a kind, code, frame, operation, type or field that one
// names and the other does not fails here.

const (
	docsPath    = "../docs/protocol.md"
	openAPIPath = "../server/openapi.json"
)

// openAPITypes maps each OpenAPI schema to the Go type it describes.
var openAPITypes = map[string]reflect.Type{
	"MessageContent":      reflect.TypeFor[MessageContent](),
	"Session":             reflect.TypeFor[Session](),
	"Turn":                reflect.TypeFor[Turn](),
	"Message":             reflect.TypeFor[Message](),
	"SessionCreateInput":  reflect.TypeFor[SessionCreateInput](),
	"SessionUpdateInput":  reflect.TypeFor[SessionUpdateInput](),
	"SubmitInput":         reflect.TypeFor[SubmitInput](),
	"CancelInput":         reflect.TypeFor[CancelInput](),
	"CreateSessionResult": reflect.TypeFor[CreateSessionResult](),
	"SessionResult":       reflect.TypeFor[SessionResult](),
	"SessionPage":         reflect.TypeFor[SessionPage](),
	"TurnPage":            reflect.TypeFor[TurnPage](),
	"MessagePage":         reflect.TypeFor[MessagePage](),
	"SendResult":          reflect.TypeFor[SendResult](),
	"CancelResult":        reflect.TypeFor[CancelResult](),
	"Error":               reflect.TypeFor[HTTPError](),
	"InteractionResponse": reflect.TypeFor[InteractionResponse](),
	"RespondInput":        reflect.TypeFor[RespondInput](),
	"Interaction":         reflect.TypeFor[Interaction](),
	"RespondResult":       reflect.TypeFor[RespondResult](),
	"SessionForkInput":    reflect.TypeFor[SessionForkInput](),
	"SessionGraph":        reflect.TypeFor[host.SessionGraph](),
	"SessionImportInput":  reflect.TypeFor[SessionImportInput](),
	"ImportResult":        reflect.TypeFor[RestoreGraphResult](),
	"Tombstone":           reflect.TypeFor[Tombstone](),
	"DeletedComponent":    reflect.TypeFor[DeletedComponent](),
	"DeleteResult":        reflect.TypeFor[DeleteSessionsResult](),
	"DeletedPage":         reflect.TypeFor[DeletedPage](),
	"RestoreResult":       reflect.TypeFor[RestoreResult](),
	"PurgeResult":         reflect.TypeFor[PurgeResult](),
	"SessionIdsInput":     reflect.TypeFor[SessionIDsInput](),
	"GoalSpec":            reflect.TypeFor[GoalSpec](),
	"GoalProvenance":      reflect.TypeFor[GoalProvenance](),
	"Goal":                reflect.TypeFor[Goal](),
	"GoalState":           reflect.TypeFor[GoalState](),
	"GoalOperation":       reflect.TypeFor[GoalOperation](),
	"GoalControlInput":    reflect.TypeFor[GoalControlInput](),
	"GoalControlResult":   reflect.TypeFor[GoalControlResult](),
	"GoalGetResult":       reflect.TypeFor[GoalGetResult](),
	"QueueEntry":          reflect.TypeFor[QueueEntry](),
	"Queue":               reflect.TypeFor[Queue](),
	"RetractInput":        reflect.TypeFor[RetractInput](),
	"RetractResult":       reflect.TypeFor[RetractResult](),
	"InterruptInput":      reflect.TypeFor[CancelInput](),
	"InterruptResult":     reflect.TypeFor[InterruptResult](),
	"GoalSummary":         reflect.TypeFor[GoalSummary](),
}

// docsTypes are the WebSocket-only types (REST has no route for them):
// docs/protocol.md names each of their fields.
var docsTypes = []reflect.Type{
	reflect.TypeFor[ClientFrame](), reflect.TypeFor[ResponseFrame](), reflect.TypeFor[ReadyFrame](),
	reflect.TypeFor[ReadyLimits](), reflect.TypeFor[RefreshResult](), reflect.TypeFor[ErrorFrame](),
	reflect.TypeFor[UnsubscribedFrame](), reflect.TypeFor[ReconnectFrame](), reflect.TypeFor[EventFrame](),
	reflect.TypeFor[Error](),
	reflect.TypeFor[InteractionSnapshot](), reflect.TypeFor[SessionSummary](), reflect.TypeFor[SessionRemoved](),
	reflect.TypeFor[TurnUpdate](), reflect.TypeFor[MessageUpdate](), reflect.TypeFor[MessageDelta](),
	reflect.TypeFor[TrashChanged](), reflect.TypeFor[QueueState](), reflect.TypeFor[Watcher](),
	reflect.TypeFor[Presence](), reflect.TypeFor[SessionSnapshot](), reflect.TypeFor[WorkspaceSnapshot](),
	reflect.TypeFor[Resume](), reflect.TypeFor[Position](), reflect.TypeFor[SessionChanges](),
	reflect.TypeFor[SubscribeResult](),
	reflect.TypeFor[WorkspaceRef](), reflect.TypeFor[SessionRef](), reflect.TypeFor[SessionListInput](),
	reflect.TypeFor[TurnListInput](), reflect.TypeFor[MessageListInput](), reflect.TypeFor[SubscribeInput](),
	reflect.TypeFor[UnsubscribeInput](), reflect.TypeFor[TypingInput](), reflect.TypeFor[RefreshInput](),
	reflect.TypeFor[TurnListResult](), reflect.TypeFor[QueueResult](), reflect.TypeFor[UnsubscribeResult](),
	reflect.TypeFor[TypingResult](),
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section is the text under the heading line that starts with prefix, up
// to the next heading of the same or a higher level.
func section(t *testing.T, doc, prefix string) string {
	t.Helper()
	level := strings.IndexByte(prefix, ' ')
	var out []string
	in := false
	for line := range strings.Lines(doc) {
		if in {
			if n := strings.IndexFunc(line, func(r rune) bool { return r != '#' }); n > 0 && n <= level && line[n] == ' ' {
				break
			}
			out = append(out, line)
		} else if strings.HasPrefix(line, prefix) {
			in = true
		}
	}
	if !in {
		t.Fatalf("%s: no heading %q", docsPath, prefix)
	}
	return strings.Join(out, "")
}

var closeRowRE = regexp.MustCompile(`(?m)^\| (\d{4}) \|`)

var rowRE = regexp.MustCompile("^\\| `([a-z_.]+)` \\|")

// tableRows returns the rows of the markdown tables in text whose first
// cell is one backticked name, split into trimmed cells.
func tableRows(text string) [][]string {
	var rows [][]string
	for line := range strings.Lines(text) {
		if rowRE.MatchString(line) {
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			for i := range cells {
				cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
			}
			rows = append(rows, cells)
		}
	}
	return rows
}

func firstCells(rows [][]string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[0]
	}
	return out
}

func sameSet(t *testing.T, what string, code, doc []string) {
	t.Helper()
	c, d := slices.Sorted(slices.Values(code)), slices.Sorted(slices.Values(doc))
	if !slices.Equal(slices.Compact(c), slices.Compact(d)) {
		t.Errorf("%s: protocol has %v, %s has %v", what, c, docsPath, d)
	}
}

func TestDocsEventKinds(t *testing.T) {
	doc := readFile(t, docsPath)
	sameSet(t, "event kinds", Kinds, firstCells(tableRows(section(t, doc, "### Event kinds"))))
}

func TestDocsErrorCodes(t *testing.T) {
	doc := readFile(t, docsPath)
	var documented []string
	for _, r := range tableRows(section(t, doc, "## Errors")) {
		if len(r) < 3 || !strings.HasPrefix(r[1], "4") && !strings.HasPrefix(r[1], "5") {
			continue // the reasons table
		}
		c := Code(r[0])
		documented = append(documented, r[0])
		if strconv.Itoa(c.HTTPStatus()) != r[1] {
			t.Errorf("%s: HTTP %d, documented %s", c, c.HTTPStatus(), r[1])
		}
		if want := map[bool]string{true: "yes", false: "no"}[c.Retryable()]; r[2] != want {
			t.Errorf("%s: retryable %s, documented %s", c, want, r[2])
		}
	}
	codes := make([]string, len(Codes))
	for i, c := range Codes {
		codes[i] = string(c)
	}
	sameSet(t, "error codes", codes, documented)
}

func TestDocsCloseCodes(t *testing.T) {
	var codes []string
	for _, c := range CloseCodes {
		codes = append(codes, strconv.Itoa(int(c)))
	}
	var documented []string
	for _, m := range closeRowRE.FindAllStringSubmatch(section(t, readFile(t, docsPath), "## Close codes"), -1) {
		if m[1] != "1009" { // the WebSocket library's own
			documented = append(documented, m[1])
		}
	}
	sameSet(t, "close codes", codes, documented)
}

func TestDocsFrames(t *testing.T) {
	frames := section(t, readFile(t, docsPath), "## Frames")
	client, server, ok := strings.Cut(frames, "Server → client:")
	if !ok {
		t.Fatal("## Frames has no server → client table")
	}
	sameSet(t, "client frames", ClientFrameTypes, firstCells(tableRows(client)))
	sameSet(t, "server frames", ServerFrameTypes, firstCells(tableRows(server)))
}

var opHeadingRE = regexp.MustCompile(`([a-zA-Z]+(?:\.[a-zA-Z]+)+|subscribe|unsubscribe) \((viewer|member|admin)\)`)

func TestDocsOperations(t *testing.T) {
	ops := section(t, readFile(t, docsPath), "## Operations")
	var documented []string
	for line := range strings.Lines(ops) {
		if !strings.HasPrefix(line, "### ") {
			continue
		}
		for _, m := range opHeadingRE.FindAllStringSubmatch(line, -1) {
			documented = append(documented, m[1])
			if role := minRole(m[1]); role != m[2] {
				t.Errorf("%s: documented for %s, the permission table says %s", m[1], m[2], role)
			}
		}
	}
	sameSet(t, "operations", Operations, documented)
}

func minRole(op string) string {
	for _, r := range []auth.Role{auth.RoleViewer, auth.RoleMember, auth.RoleAdmin} {
		if auth.Allowed(r, op) {
			return r.String()
		}
	}
	return "none"
}

// jsonFields are the JSON names of t's fields, embedded structs inlined.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case name == "-":
		case f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct:
			maps.Copy(out, jsonFields(f.Type))
		case f.IsExported():
			if name == "" {
				name = f.Name
			}
			out[name] = f
		}
	}
	return out
}

// pathParams are input fields a REST route takes from its path.
var pathParams = []string{"workspace", "sessionId", "turnId", "requestId"}

type schema struct {
	Type       string             `json:"type"`
	Properties map[string]*schema `json:"properties"`
	Enum       []string           `json:"enum"`
	Items      *schema            `json:"items"`
}

func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(readFile(t, openAPIPath)), &doc); err != nil {
		t.Fatal(err)
	}
	sameSet(t, "OpenAPI schemas", slices.Collect(maps.Keys(openAPITypes)), slices.Collect(maps.Keys(doc.Components.Schemas)))
	for name, typ := range openAPITypes {
		if s := doc.Components.Schemas[name]; s != nil {
			compareSchema(t, name, s, typ, strings.HasSuffix(name, "Input"))
		}
	}
	var codes []string
	if e := doc.Components.Schemas["Error"]; e != nil && e.Properties["error"] != nil && e.Properties["error"].Properties["code"] != nil {
		codes = e.Properties["error"].Properties["code"].Enum
	}
	want := make([]string, len(Codes))
	for i, c := range Codes {
		want[i] = string(c)
	}
	if !slices.Equal(codes, want) {
		t.Errorf("OpenAPI error codes %v, protocol %v", codes, want)
	}
}

// compareSchema checks that schema s has exactly typ's JSON fields (an
// input may leave out the ones its route takes from the path), and
// recurses into inline object schemas.
func compareSchema(t *testing.T, name string, s *schema, typ reflect.Type, input bool) {
	t.Helper()
	fields := jsonFields(typ)
	for p, ps := range s.Properties {
		f, ok := fields[p]
		if !ok {
			t.Errorf("OpenAPI %s.%s: %s has no such field", name, p, typ)
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if inner := ps; inner.Items != nil {
			inner = inner.Items
			ps = inner
		}
		if ps.Properties != nil && ft.Kind() == reflect.Struct {
			compareSchema(t, name+"."+p, ps, ft, false)
		}
	}
	for f := range fields {
		if _, ok := s.Properties[f]; !ok && !(input && slices.Contains(pathParams, f)) {
			t.Errorf("OpenAPI %s has no property %q (%s has it)", name, f, typ)
		}
	}
}

// The WebSocket-only types are described in prose: every field name
// appears in docs/protocol.md, quoted or in backticks.
func TestDocsNameEveryField(t *testing.T) {
	doc := readFile(t, docsPath)
	for _, typ := range docsTypes {
		for f := range jsonFields(typ) {
			// An optional field is written with a trailing "?".
			if !slices.ContainsFunc([]string{"`" + f + "`", "`" + f + "?`", `"` + f + `"`, `"` + f + `?"`}, func(s string) bool { return strings.Contains(doc, s) }) {
				t.Errorf("%s.%s: %s never names %q", typ.Name(), f, docsPath, f)
			}
		}
	}
}

// Every exported struct type of the package is described somewhere.
func TestEveryWireTypeIsDescribed(t *testing.T) {
	// A type is described when it is, or is reachable from the fields of,
	// one that is: nested objects are checked through their parents.
	described := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeFor[Error]().PkgPath() || described[typ.Name()] {
			return
		}
		described[typ.Name()] = true
		for i := range typ.NumField() {
			walk(typ.Field(i).Type)
		}
	}
	for _, typ := range slices.Concat(slices.Collect(maps.Values(openAPITypes)), docsTypes) {
		walk(typ)
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		ast.Inspect(pkg, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.IsExported() {
				if _, isStruct := ts.Type.(*ast.StructType); isStruct && !described[ts.Name.Name] {
					t.Errorf("%s is in no OpenAPI schema and not in docsTypes", ts.Name.Name)
				}
			}
			return true
		})
	}
}
