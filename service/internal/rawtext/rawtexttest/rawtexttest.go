// Package rawtexttest holds the byte sequences that are not valid UTF-8,
// for the tests of every front door that must refuse them (package
// rawtext).
package rawtexttest

// Sample is one byte sequence that is not UTF-8, inside otherwise valid
// text.
type Sample struct {
	Name  string
	Bytes string
}

// Invalid are the kinds of invalid UTF-8: lone continuation bytes,
// overlong encodings, surrogates encoded in UTF-8, sequences cut short,
// bytes that never occur, a code point past U+10FFFF.
var Invalid = []Sample{
	{"lone continuation 0x80", "a\x80b"},
	{"lone continuation 0xBF", "\xbf"},
	{"continuation run", "ab\x80\x80\x80"},
	{"overlong slash (2 bytes)", "a\xc0\xafb"},
	{"overlong NUL (2 bytes)", "\xc0\x80"},
	{"overlong slash (3 bytes)", "\xe0\x80\xaf"},
	{"overlong slash (4 bytes)", "\xf0\x80\x80\xaf"},
	{"surrogate U+D800 in UTF-8", "x\xed\xa0\x80"},
	{"surrogate U+DFFF in UTF-8", "\xed\xbf\xbfy"},
	{"surrogate pair in UTF-8", "\xed\xa0\xbd\xed\xb8\x80"},
	{"truncated 2-byte", "caf\xc3"},
	{"truncated 3-byte", "\xe2\x82"},
	{"truncated 4-byte", "\xf0\x9f\x98 x"},
	{"0xFF", "\xff"},
	{"0xFE", "a\xfeb"},
	{"0xC1 lead", "\xc1\xbf"},
	{"past U+10FFFF", "\xf4\x90\x80\x80"},
	{"5-byte lead", "\xf8\x88\x80\x80\x80"},
}

// Escapes are JSON string escapes that name no Unicode character (an
// unpaired surrogate), which encoding/json also turns into U+FFFD: for the
// front doors that read JSON. Each is the text between a string's quotes.
var Escapes = []Sample{
	{"lone high surrogate escape", `a\ud800b`},
	{"lone low surrogate escape", `\uDC00`},
	{"high surrogate then a letter escape", `\ud83d\u0041`},
	{"high surrogate at the end", `x\uD83D`},
	{"two high surrogates", `\ud83d\ud83d`},
}
