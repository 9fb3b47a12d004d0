package hooks

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Expr is a compiled `if` condition. The syntax is small on purpose:
//
//	expr    := or
//	or      := and { "||" and }
//	and     := unary { "&&" unary }
//	unary   := "!" unary | compare
//	compare := operand [ ("==" | "!=" | "in" | "not in") operand ]
//	operand := "string" | 'string' | number | true | false | variable | [ operand, ... ] | ( expr )
//
// Variables are the context variables (Variables); one the envelope does not
// carry is the empty string. == and != compare values as text (number 42
// equals "42"). `x in list` is membership, `x in text` a substring test. A
// bare operand is true when it is true, a non-empty text or list, or a
// non-zero number.
type Expr struct {
	src  string
	root node
}

// ErrBadExpr is wrapped by every error of Compile.
var ErrBadExpr = errors.New("bad condition")

// shorten cuts a condition quoted in an error to 80 characters.
func shorten(src string) string {
	if len(src) <= 80 {
		return src
	}
	return src[:77] + "..."
}

// Compile parses a condition.
func Compile(src string) (*Expr, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadExpr, shorten(src), err)
	}
	p := &parser{toks: toks}
	n, err := p.or()
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadExpr, shorten(src), err)
	}
	return &Expr{src: src, root: n}, nil
}

func (x *Expr) String() string { return x.src }

// Eval reports whether the condition holds in c.
func (x *Expr) Eval(c Context) bool { return truthy(x.root.eval(c)) }

type tokKind int

const (
	tEOF tokKind = iota
	tStr
	tNum
	tIdent
	tOp
)

type token struct {
	kind tokKind
	text string
	val  any
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'':
			j := i + 1
			var b strings.Builder
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, token{kind: tStr, text: s[i : j+1], val: b.String()})
			i = j + 1
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
				j++
			}
			f, err := strconv.ParseFloat(s[i:j], 64)
			if err != nil {
				return nil, fmt.Errorf("bad number %q", s[i:j])
			}
			out = append(out, token{kind: tNum, text: s[i:j], val: f})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{kind: tIdent, text: s[i:j]})
			i = j
		default:
			if i+1 < len(s) {
				if two := s[i : i+2]; two == "==" || two == "!=" || two == "&&" || two == "||" {
					out = append(out, token{kind: tOp, text: two})
					i += 2
					continue
				}
			}
			if strings.IndexByte("!()[],", c) < 0 {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			out = append(out, token{kind: tOp, text: string(c)})
			i++
		}
	}
	return out, nil
}

// MaxNesting is how deep a condition may nest parentheses, lists and "!".
const MaxNesting = 64

type parser struct {
	toks  []token
	pos   int
	depth int
}

// enter counts one more level of nesting, refused beyond MaxNesting (a
// deeper condition would overflow the stack).
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxNesting {
		return fmt.Errorf("nested more than %d levels deep", MaxNesting)
	}
	return nil
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{kind: tEOF}
}

func (p *parser) isOp(text string) bool {
	t := p.peek()
	return (t.kind == tOp || t.kind == tIdent) && t.text == text
}

func (p *parser) or() (node, error) {
	return p.chain("||", p.and, func(l, r node) node { return orNode{l, r} })
}

func (p *parser) and() (node, error) {
	return p.chain("&&", p.unary, func(l, r node) node { return andNode{l, r} })
}

// chain parses operands (next) joined by the left-associative op, joining
// each pair with join.
func (p *parser) chain(op string, next func() (node, error), join func(l, r node) node) (node, error) {
	l, err := next()
	for err == nil && p.isOp(op) {
		p.pos++
		var r node
		if r, err = next(); err == nil {
			l = join(l, r)
		}
	}
	return l, err
}

func (p *parser) unary() (node, error) {
	if p.isOp("!") {
		p.pos++
		if err := p.enter(); err != nil {
			return nil, err
		}
		n, err := p.unary()
		p.depth--
		return notNode{n}, err
	}
	return p.compare()
}

func (p *parser) compare() (node, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	op := ""
	switch {
	case p.isOp("=="), p.isOp("!="), p.isOp("in"):
		op = p.peek().text
		p.pos++
	case p.isOp("not") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tIdent && p.toks[p.pos+1].text == "in":
		op = "not in"
		p.pos += 2
	default:
		return l, nil
	}
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	return cmpNode{op, l, r}, nil
}

func (p *parser) operand() (node, error) {
	t := p.peek()
	switch {
	case t.kind == tStr || t.kind == tNum:
		p.pos++
		return lit{t.val}, nil
	case t.kind == tIdent:
		p.pos++
		switch t.text {
		case "true":
			return lit{true}, nil
		case "false":
			return lit{false}, nil
		case "in", "not":
			return nil, fmt.Errorf("unexpected %q", t.text)
		}
		if !knownVariable(t.text) {
			return nil, fmt.Errorf("unknown variable %q (known: %s)", t.text, strings.Join(Variables(), ", "))
		}
		return variable(t.text), nil
	case p.isOp("("):
		p.pos++
		if err := p.enter(); err != nil {
			return nil, err
		}
		n, err := p.or()
		p.depth--
		if err != nil {
			return nil, err
		}
		if !p.isOp(")") {
			return nil, errors.New("missing )")
		}
		p.pos++
		return n, nil
	case p.isOp("["):
		p.pos++
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		var items []node
		for !p.isOp("]") {
			if len(items) > 0 {
				if !p.isOp(",") {
					return nil, errors.New("want , or ] in a list")
				}
				p.pos++
			}
			n, err := p.operand()
			if err != nil {
				return nil, err
			}
			items = append(items, n)
		}
		p.pos++
		return listNode(items), nil
	case t.kind == tEOF:
		return nil, errors.New("unexpected end")
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

type node interface{ eval(Context) any }

type (
	lit      struct{ v any }
	variable string
	listNode []node
	notNode  struct{ n node }
	andNode  struct{ l, r node }
	orNode   struct{ l, r node }
	cmpNode  struct {
		op   string
		l, r node
	}
)

func (n lit) eval(Context) any        { return n.v }
func (n variable) eval(c Context) any { return c[string(n)] }
func (n notNode) eval(c Context) any  { return !truthy(n.n.eval(c)) }
func (n andNode) eval(c Context) any  { return truthy(n.l.eval(c)) && truthy(n.r.eval(c)) }
func (n orNode) eval(c Context) any   { return truthy(n.l.eval(c)) || truthy(n.r.eval(c)) }

func (n listNode) eval(c Context) any {
	out := make([]any, len(n))
	for i, x := range n {
		out[i] = x.eval(c)
	}
	return out
}

func (n cmpNode) eval(c Context) any {
	l, r := n.l.eval(c), n.r.eval(c)
	switch n.op {
	case "==":
		return text(l) == text(r)
	case "!=":
		return text(l) != text(r)
	case "in":
		return contains(r, l)
	default: // not in
		return !contains(r, l)
	}
}

func contains(coll, x any) bool {
	switch v := coll.(type) {
	case []any:
		for _, item := range v {
			if text(item) == text(x) {
				return true
			}
		}
		return false
	case []string:
		for _, item := range v {
			if item == text(x) {
				return true
			}
		}
		return false
	case nil:
		return false
	}
	return strings.Contains(text(coll), text(x))
}

// text is a value as compared: numbers without trailing zeros, nil as "".
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case float64:
		return x != 0
	case int:
		return x != 0
	case []any:
		return len(x) > 0
	case []string:
		return len(x) > 0
	}
	return true
}
