package httpapi

// decodePlain decodes body as jsonbody.Decode would into a Request when
// body is the plain form a check's client sends: one object whose members
// are named exactly as Request's fields, with string values of printable
// ASCII without escapes and an integer request_count, white space between.
// ok is false for anything else (escapes, other spellings of a name, null,
// numbers that are not plain integers, syntax errors, trailing data): the
// caller then decodes with encoding/json, whose errors it words. A member
// given twice keeps its last value, as encoding/json keeps it.
func decodePlain(body []byte) (req Request, ok bool) {
	d := plainDecoder{b: body}
	if !d.byte('{') {
		return Request{}, false
	}
	if d.byte('}') {
		return req, d.end()
	}
	for {
		name, ok := d.str()
		if !ok || !d.byte(':') || !d.member(&req, name) {
			return Request{}, false
		}
		if d.byte('}') {
			return req, d.end()
		}
		if !d.byte(',') {
			return Request{}, false
		}
	}
}

// plainDecoder reads a plain JSON object from b at i.
type plainDecoder struct {
	b []byte
	i int
}

// space skips JSON white space.
func (d *plainDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

// byte skips white space and c, reporting whether c was there.
func (d *plainDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (d *plainDecoder) end() bool {
	d.space()
	return d.i == len(d.b)
}

// str reads a string of printable ASCII without escapes and returns its
// bytes (b's).
func (d *plainDecoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	from := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[from : d.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// member reads the value of the member name into req.
func (d *plainDecoder) member(req *Request, name []byte) bool {
	var field *string
	switch string(name) {
	case "key_type":
		field = &req.KeyType
	case "key_value":
		field = &req.KeyValue
	case "rule_id":
		field = &req.RuleID
	case "endpoint":
		field = &req.Endpoint
	case "idempotency_key":
		field = &req.IdempotencyKey
	case "request_count":
		n, ok := d.integer()
		if ok {
			req.RequestCount = &n
		}
		return ok
	default:
		return false
	}
	s, ok := d.str()
	*field = string(s)
	return ok
}

// integer reads an int64 written as JSON writes integers:
// -?(0|[1-9][0-9]*), in range.
func (d *plainDecoder) integer() (int64, bool) {
	d.space()
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	from := d.i
	var n uint64
	for ; d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9'; d.i++ {
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(d.b[d.i]-'0')
	}
	switch {
	case d.i == from, d.b[from] == '0' && d.i > from+1, n > 1<<63, !neg && n == 1<<63:
		return 0, false
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return 0, false
	case neg:
		return -int64(n-1) - 1, true
	}
	return int64(n), true
}
