//! Just enough JSON for the protocol: a reader and a writer, standard library only.
//!
//! Numbers are where exactness lives. Reading hands each number's text to
//! `str::parse::<f64>()`, which rounds correctly; writing uses `{:?}`, which prints the
//! shortest decimal that reads back to the same `f64` (`0.1`, `-0.0`, `1e-310`, `2.0`).
//! `{:?}` would print `inf` and `NaN` too, which JSON does not have, so the writer
//! refuses them instead (the protocol never sends them either).

use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// Every number read, and the tensor values written.
    Number(f64),
    /// Written without a decimal point: shapes and `"version"` must be JSON integers
    /// (qkv refuses a shape of `[2.0]`), and `{:?}` would write `2.0`.
    Integer(u64),
    String(String),
    Array(Vec<Json>),
    /// Members in the order written; look-ups take the first of a repeated key.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `key` of an object, if this is one and it has it.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(x) => Some(*x),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// A non-negative integer (ids, shape dimensions); `None` for `1.5`, `-1` or `"1"`.
    pub fn as_usize(&self) -> Option<usize> {
        let x = self.as_f64()?;
        // Below 2^53 every integer is exact in an f64, so this cannot round.
        (x >= 0.0 && x.fract() == 0.0 && x < 9_007_199_254_740_992.0).then_some(x as usize)
    }
}

/// `text` as one JSON value (surrounding whitespace allowed). `Err` says what and where.
pub fn parse(text: &str) -> Result<Json, String> {
    let mut reader = Reader { bytes: text.as_bytes(), at: 0 };
    let value = reader.value(0)?;
    reader.skip_space();
    if reader.at != reader.bytes.len() {
        return Err(reader.error("text after the JSON value"));
    }
    Ok(value)
}

const MAX_DEPTH: usize = 64; // qkv's messages nest three deep; this only stops a runaway stack

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(&self, what: &str) -> String {
        format!("{what} at byte {}", self.at)
    }

    fn skip_space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.bytes.get(self.at) != Some(&byte) {
            return Err(self.error(&format!("expected '{}'", byte as char)));
        }
        self.at += 1;
        Ok(())
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if !self.bytes[self.at..].starts_with(word.as_bytes()) {
            return Err(self.error("unexpected character"));
        }
        self.at += word.len();
        Ok(value)
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("JSON nested too deeply"));
        }
        self.skip_space();
        match self.bytes.get(self.at) {
            None => Err(self.error("unexpected end of text")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(_) => self.number(),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, String> {
        self.expect(b'{')?;
        let mut members = Vec::new();
        self.skip_space();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_space();
            let key = self.string()?;
            self.skip_space();
            self.expect(b':')?;
            members.push((key, self.value(depth + 1)?));
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_space();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self.bytes.get(self.at..self.at + 4).ok_or_else(|| self.error("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("bad \\u escape"))?;
        let code = u32::from_str_radix(text, 16).map_err(|_| self.error("bad \\u escape"))?;
        self.at += 4;
        Ok(code)
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.at;
            // Copy the run of plain characters at once (the input is already valid UTF-8).
            while let Some(&byte) = self.bytes.get(self.at) {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(std::str::from_utf8(&self.bytes[start..self.at]).expect("a &str's bytes"));
            match self.bytes.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let escape = *self.bytes.get(self.at).ok_or_else(|| self.error("unfinished escape"))?;
                    self.at += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xD800..0xDC00).contains(&code) && self.bytes[self.at..].starts_with(b"\\u") {
                                self.at += 2;
                                let low = self.hex4()?;
                                code = 0x10000 + ((code - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF);
                            }
                            out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                        }
                        _ => return Err(self.error("unknown escape")),
                    }
                }
                Some(_) => return Err(self.error("control character in a string")),
                None => return Err(self.error("unfinished string")),
            }
        }
    }

    /// JSON's number grammar, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, then
    /// `parse::<f64>()` on exactly that text (correctly rounded, so `0.1` is the same f64
    /// qkv meant). Rust's parser alone would also take `inf` or `+1`, hence the scan first.
    fn number(&mut self) -> Result<Json, String> {
        let start = self.at;
        let digits = |reader: &mut Self| {
            let from = reader.at;
            while matches!(reader.bytes.get(reader.at), Some(b'0'..=b'9')) {
                reader.at += 1;
            }
            reader.at - from
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let leading_zero = self.bytes.get(self.at) == Some(&b'0');
        let whole = digits(self);
        if whole == 0 || (leading_zero && whole > 1) {
            self.at = start;
            return Err(self.error("not a JSON value"));
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.error("digits expected after '.'"));
            }
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.error("digits expected in the exponent"));
            }
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).expect("ASCII digits");
        let x: f64 = text.parse().map_err(|_| self.error("unreadable number"))?;
        if !x.is_finite() {
            return Err(self.error("number too large for f64"));
        }
        Ok(Json::Number(x))
    }
}

/// One line of JSON (no newline). `Err` names a number JSON cannot hold (NaN, infinity).
pub fn write(value: &Json) -> Result<String, String> {
    let mut out = String::new();
    write_into(value, &mut out)?;
    Ok(out)
}

fn write_into(value: &Json, out: &mut String) -> Result<(), String> {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(x) => write_number(*x, out)?,
        Json::Integer(n) => write!(out, "{n}").expect("writing to a String"),
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_into(item, out)?;
            }
            out.push(']');
        }
        Json::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_into(item, out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// The shortest round-trip spelling: `{:?}` gives `0.1`, `-0.0`, `1e-7`, `1e300`, `2.0`,
/// all valid JSON. Keep the `-0.0`: a reader such as Python's takes `-0` as the integer 0.
fn write_number(x: f64, out: &mut String) -> Result<(), String> {
    if !x.is_finite() {
        return Err(format!("{x} is not a number JSON can hold"));
    }
    write!(out, "{x:?}").expect("writing to a String");
    Ok(())
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).expect("writing to a String"),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Doubles that a digit-losing writer or a sloppy reader gets wrong.
    const AWKWARD: [f64; 12] = [0.1, 1.0 / 3.0, -0.0, 2.0, 1e-310, 5e-324, 2.2250738585072014e-308,
                                1.7976931348623157e308, 1e21, 1e-7, 0.30000000000000004, -123.456];

    #[test]
    fn numbers_round_trip_bit_for_bit() {
        for x in AWKWARD {
            let text = write(&Json::Number(x)).unwrap();
            let back = parse(&text).unwrap().as_f64().unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x:?} was written {text}");
        }
    }

    #[test]
    fn shortest_spellings() {
        let spelled: Vec<String> = [0.1, -0.0, 1e-310, 2.0, 1e300].iter()
            .map(|&x| write(&Json::Number(x)).unwrap()).collect();
        assert_eq!(spelled, ["0.1", "-0.0", "1e-310", "2.0", "1e300"]);
        assert_eq!(write(&Json::Integer(2)).unwrap(), "2");
    }

    #[test]
    fn reads_pythons_spellings() {
        // Python's repr, which qkv writes: exponents with a sign and a leading zero.
        let line = r#"{"v":[1e-05,1e+300,-0.0,3,0.1]}"#;
        let values: Vec<f64> = parse(line).unwrap().get("v").unwrap().as_array().unwrap()
            .iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(values, [1e-5, 1e300, 0.0, 3.0, 0.1]);
        assert!(values[2].is_sign_negative());
    }

    #[test]
    fn refuses_what_json_has_not() {
        assert!(write(&Json::Number(f64::INFINITY)).is_err());
        assert!(write(&Json::Number(f64::NAN)).is_err());
        for bad in ["NaN", "inf", "1e400", "01", "+1", "1.", "[1,]", "{\"a\" 1}", "\"open"] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn strings_and_nesting() {
        let value = parse(r#" {"op": "he\"llo\u00e9", "x": [true, null, {}]} "#).unwrap();
        assert_eq!(value.get("op").unwrap().as_str(), Some("he\"lloé"));
        assert_eq!(write(&value).unwrap(), r#"{"op":"he\"lloé","x":[true,null,{}]}"#);
    }
}
