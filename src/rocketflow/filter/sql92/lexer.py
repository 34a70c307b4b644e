"""The tokens of an SQL92 expression (the lexical rules of the package doc)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from rocketflow.filter.sql92.errors import FilterSyntaxError

END: Final = "end"
KEYWORD: Final = "keyword"
IDENTIFIER: Final = "identifier"
INTEGER: Final = "integer"
FLOAT: Final = "float"
STRING: Final = "string"
OPERATOR: Final = "operator"

_KEYWORDS: Final = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
UNSUPPORTED: Final = frozenset({"LIKE", "ESCAPE", "CONTAINS", "STARTSWITH", "ENDSWITH"})
_BLANKS: Final = " \t\n\r\f"
_LINE_COMMENT: Final = re.compile(r"--[^\n\r]*(?:\r\n|\n|\r)")
_BLOCK_COMMENT: Final = re.compile(r"/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
_STRING_LITERAL: Final = re.compile(r"'(?:''|[^'])*'")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOATING: Final = re.compile(
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
_IDENT: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_IDENT_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_DIGITS: Final = frozenset("0123456789")
_OPERATOR_HINTS: Final = {"!=": "<>", "==": "=", "&&": "AND", "||": "OR", "!": "NOT", "&": "AND", "|": "OR"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str  # keywords upper-cased; otherwise the source text
    pos: int

    def describe(self) -> str:
        if self.kind == END:
            return "end of input"
        if self.kind == KEYWORD:
            return f"keyword {self.text}"
        if self.kind == OPERATOR:
            return f"'{self.text}'"
        if self.kind == STRING:
            shown = self.text if len(self.text) <= 40 else self.text[:37] + "..."
            return f"string {shown}"
        return f"{self.kind} {self.text}" if self.kind != IDENTIFIER else f"identifier '{self.text}'"


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    n = len(text)
    i = 0
    while True:
        while i < n:  # blanks and comments
            ch = text[i]
            if ch in _BLANKS:
                i += 1
            elif ch == "-" and text.startswith("--", i) and (found := _LINE_COMMENT.match(text, i)) is not None:
                i = found.end()
            elif ch == "/" and text.startswith("/*", i):
                found = _BLOCK_COMMENT.match(text, i)
                if found is None:
                    raise FilterSyntaxError(f"unterminated comment starting at position {i}: expected '*/'", i)
                i = found.end()
            else:
                break
        if i >= n:
            tokens.append(Token(END, "", n))
            return tokens
        ch = text[i]
        if ch == "'":
            found = _STRING_LITERAL.match(text, i)
            if found is None:
                raise FilterSyntaxError(f"unterminated string literal starting at position {i}: "
                                        "expected a closing quote (write '' for a quote inside)", i)
            tokens.append(Token(STRING, found.group(), i))
            i = found.end()
        elif ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            floating = _FLOATING.match(text, i)
            decimal = _DECIMAL.match(text, i)
            if floating is not None and (decimal is None or floating.end() > decimal.end()):
                tokens.append(Token(FLOAT, floating.group(), i))
                i = floating.end()
            else:
                assert decimal is not None
                tokens.append(Token(INTEGER, decimal.group(), i))
                i = decimal.end()
        elif ch in _IDENT_START:
            found = _IDENT.match(text, i)
            assert found is not None
            word = found.group()
            upper = word.upper()
            tokens.append(Token(KEYWORD, upper, i) if upper in _KEYWORDS else Token(IDENTIFIER, word, i))
            i = found.end()
        else:
            pair = text[i:i + 2]
            if pair in ("<>", "<=", ">="):
                tokens.append(Token(OPERATOR, pair, i))
                i += 2
            elif pair in _OPERATOR_HINTS:
                raise FilterSyntaxError(f"unknown operator '{pair}' at position {i}: "
                                        f"expected {_OPERATOR_HINTS[pair]!r}", i)
            elif ch in "=<>(),+-":
                tokens.append(Token(OPERATOR, ch, i))
                i += 1
            else:
                hint = f"; use {_OPERATOR_HINTS[ch]}" if ch in _OPERATOR_HINTS else ""
                raise FilterSyntaxError(f"unexpected character {ch!r} at position {i}: expected an operator, "
                                        f"a property name, a literal or a parenthesis{hint}", i)


__all__ = ["END", "FLOAT", "IDENTIFIER", "INTEGER", "KEYWORD", "OPERATOR", "STRING", "UNSUPPORTED", "Token", "tokenize"]
