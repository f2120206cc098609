import Foundation

/// One golden case file, `Tests/golden/<command>-<details>.txt`, parsed: its steps (commands
/// with their expected output) and its fixture files. Tests/golden/README.md is the format's
/// reference; this is its parser.
struct GoldenScript {
    /// An expected stream: its lines, whether more may follow (`> ...`), whether the output
    /// ends without a newline (`(no-eol)`), and where the lines are in the file.
    struct Expectation {
        /// The expected lines as bytes (an `(esc)` line may hold any byte).
        var lines: [[UInt8]] = []
        var open = false
        var noFinalNewline = false

        /// The whole expected output (when not ``open``).
        var bytes: [UInt8] {
            guard !lines.isEmpty else { return [] }
            return Array(lines.joined(separator: [10])) + (noFinalNewline ? [] : [10])
        }
    }

    /// One line of the script.
    struct Step {
        /// The 1-based line number in the case file.
        var line: Int
        /// Conditions that must hold for the step to run (`[exec:zsh]`, `[!env:X]`).
        var conditions: [(negated: Bool, kind: String, value: String)]
        /// `!`: the command is expected to fail.
        var expectFailure: Bool
        /// `[exit N]`: the exact status expected.
        var expectedStatus: Int32?
        /// The step's name (`coven`, `exec`, `env`, …) and its words, unexpanded.
        var name: String
        var words: [String]
        var stdout = Expectation()
        var stderr = Expectation()
        /// The 0-based range of lines the expectations occupy (empty, just after the command,
        /// when there are none): what recording replaces.
        var expectationLines: Range<Int>
    }

    var steps: [Step] = []
    /// Fixture files, relative to `$WORK`, in file order.
    var files: [(path: String, content: String)] = []
    /// The file's lines, for recording.
    var lines: [String] = []

    /// The builtins after which `>`/`2>` lines may follow.
    static let producesOutput: Set<String> = ["coven", "exec"]
    /// Every step name.
    static let builtins: Set<String> = ["coven", "exec", "env", "unset", "cd", "stdin", "cmp", "capture", "normalize", "skip"]

    /// Parses a case.
    ///
    /// - Throws: ``GoldenFormatError`` with the line of the first mistake.
    init(_ text: String) throws {
        lines = text.components(separatedBy: "\n")
        if lines.last == "" { lines.removeLast() }
        var index = 0
        while index < lines.count {
            let line = lines[index]
            if Self.fixtureName(line) != nil { break }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") {
                index += 1
                continue
            }
            if Self.expectation(line) != nil {
                throw GoldenFormatError(line: index + 1, message: "an expected output line must follow a coven or exec line")
            }
            var step = try Self.step(line, number: index + 1)
            index += 1
            let start = index
            while index < lines.count, let (stream, text) = Self.expectation(lines[index]) {
                guard Self.producesOutput.contains(step.name) else {
                    throw GoldenFormatError(line: index + 1, message: "'\(step.name)' prints nothing to expect")
                }
                var expectation = stream == 1 ? step.stdout : step.stderr
                if expectation.open || expectation.noFinalNewline {
                    throw GoldenFormatError(line: index + 1, message: "nothing may follow '...' or '(no-eol)' in the same stream")
                }
                try Self.add(text, to: &expectation, line: index + 1)
                if stream == 1 { step.stdout = expectation } else { step.stderr = expectation }
                index += 1
            }
            step.expectationLines = start..<index
            steps.append(step)
        }
        while index < lines.count, let name = Self.fixtureName(lines[index]) {
            index += 1
            var content: [String] = []
            while index < lines.count, Self.fixtureName(lines[index]) == nil {
                content.append(lines[index])
                index += 1
            }
            files.append((name, content.isEmpty ? "" : content.joined(separator: "\n") + "\n"))
        }
    }

    /// `-- NAME --` starts a fixture file.
    static func fixtureName(_ line: String) -> String? {
        guard line.hasPrefix("-- "), line.hasSuffix(" --"), line.count > 6 else { return nil }
        return String(line.dropFirst(3).dropLast(3)).trimmingCharacters(in: .whitespaces)
    }

    /// `(1, text)` for `> text`, `(2, text)` for `2> text`; a bare `>` is an empty line.
    static func expectation(_ line: String) -> (Int, String)? {
        for (prefix, stream) in [("2>", 2), (">", 1)] where line.hasPrefix(prefix) {
            let rest = line.dropFirst(prefix.count)
            if rest.isEmpty { return (stream, "") }
            if rest.hasPrefix(" ") { return (stream, String(rest.dropFirst())) }
        }
        return nil
    }

    /// Adds one expected line, decoding `(esc)` and noting `...` and `(no-eol)`.
    private static func add(_ raw: String, to expectation: inout Expectation, line: Int) throws {
        var text = raw
        if text == "..." {
            expectation.open = true
            return
        }
        if text.hasSuffix(" (no-eol)") {
            text = String(text.dropLast(9))
            expectation.noFinalNewline = true
        } else if text == "(no-eol)" {
            text = ""
            expectation.noFinalNewline = true
        }
        if text.hasSuffix(" (esc)") {
            expectation.lines.append(try unescape(String(text.dropLast(6)), line: line))
        } else {
            expectation.lines.append(Array(text.utf8))
        }
    }

    // MARK: - Command lines

    /// Parses `[cond] ! name words… [exit N]`.
    private static func step(_ line: String, number: Int) throws -> Step {
        var words = try split(line, number: number)
        var conditions: [(Bool, String, String)] = []
        while let first = words.first, first.raw.hasPrefix("["), first.raw.hasSuffix("]"), !first.quoted {
            let body = first.raw.dropFirst().dropLast()
            let negated = body.hasPrefix("!")
            let parts = body.dropFirst(negated ? 1 : 0).split(separator: ":", maxSplits: 1)
            guard parts.count == 2, ["exec", "env"].contains(parts[0]) else {
                throw GoldenFormatError(line: number, message: "unknown condition '\(first.raw)' (use [exec:PROGRAM] or [env:NAME], optionally negated with '!')")
            }
            conditions.append((negated, String(parts[0]), String(parts[1])))
            words.removeFirst()
        }
        var expectFailure = false
        if words.first?.raw == "!", words.first?.quoted == false {
            expectFailure = true
            words.removeFirst()
        }
        var status: Int32?
        if words.count >= 2, words[words.count - 2].raw == "[exit", !words[words.count - 2].quoted,
           words[words.count - 1].raw.hasSuffix("]") {
            guard let value = Int32(words[words.count - 1].raw.dropLast()) else {
                throw GoldenFormatError(line: number, message: "'[exit N]' needs a number")
            }
            guard expectFailure, value != 0 else {
                throw GoldenFormatError(line: number, message: "'[exit N]' goes with '!' and a non-zero N")
            }
            status = value
            words.removeLast(2)
        }
        guard let name = words.first?.raw else { throw GoldenFormatError(line: number, message: "no command") }
        guard builtins.contains(name) else {
            throw GoldenFormatError(line: number, message: "unknown command '\(name)' (run programs with 'exec \(name) …')")
        }
        if expectFailure, !producesOutput.contains(name), name != "cmp" {
            throw GoldenFormatError(line: number, message: "'!' goes with coven, exec or cmp")
        }
        return Step(
            line: number, conditions: conditions, expectFailure: expectFailure, expectedStatus: status,
            name: name, words: words.dropFirst().map(\.raw), expectationLines: number..<number)
    }

    /// A word as written: its text with quotes kept (expansion happens when the step runs).
    struct Word {
        var raw: String
        var quoted: Bool
    }

    /// Splits a line into words at unquoted blanks; quotes stay in the text for ``expand``.
    static func split(_ line: String, number: Int) throws -> [Word] {
        var words: [Word] = []
        var current = ""
        var quoted = false
        var inWord = false
        var quote: Character?
        var escaped = false
        for character in line {
            if escaped {
                current.append(character)
                escaped = false
                continue
            }
            if let open = quote {
                current.append(character)
                if character == open { quote = nil } else if character == "\\", open == "\"" { escaped = true }
                continue
            }
            switch character {
            case " ", "\t":
                if inWord { words.append(Word(raw: current, quoted: quoted)) }
                current = ""
                quoted = false
                inWord = false
            case "'", "\"":
                quote = character
                quoted = true
                inWord = true
                current.append(character)
            case "\\":
                escaped = true
                inWord = true
                current.append(character)
            default:
                inWord = true
                current.append(character)
            }
        }
        if quote != nil { throw GoldenFormatError(line: number, message: "unterminated quote") }
        if inWord { words.append(Word(raw: current, quoted: quoted)) }
        return words
    }

    /// A word's value: quotes removed, `\x` kept as `x` outside single quotes, and `$NAME` or
    /// `${NAME}` replaced outside single quotes.
    ///
    /// - Throws: ``GoldenFormatError`` for a variable that is not set.
    static func expand(_ word: String, _ variables: [String: String], line: Int) throws -> String {
        var result = ""
        var characters = Array(word)[...]
        var quote: Character?
        while let character = characters.popFirst() {
            if quote == "'" {
                if character == "'" { quote = nil } else { result.append(character) }
            } else if character == "\\", let next = characters.popFirst() {
                result.append(next)
            } else if character == quote {
                quote = nil
            } else if quote == nil, character == "'" || character == "\"" {
                quote = character
            } else if character == "$" {
                var name = ""
                if characters.first == "{" {
                    characters.removeFirst()
                    while let next = characters.popFirst(), next != "}" { name.append(next) }
                } else {
                    while let next = characters.first, next.isLetter || next.isNumber || next == "_" {
                        name.append(next)
                        characters.removeFirst()
                    }
                }
                if name.isEmpty {
                    result.append("$")
                    continue
                }
                guard let value = variables[name] else {
                    throw GoldenFormatError(line: line, message: "variable $\(name) is not set")
                }
                result += value
            } else {
                result.append(character)
            }
        }
        return result
    }

    // MARK: - Escapes in expected lines

    /// Decodes `\\`, `\t`, `\r`, `\0` and `\xNN` (bytes, so invalid UTF-8 can be expected).
    static func unescape(_ text: String, line: Int) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8)[...]
        while let byte = iterator.popFirst() {
            guard byte == UInt8(ascii: "\\") else {
                bytes.append(byte)
                continue
            }
            switch iterator.popFirst() {
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "t"): bytes.append(9)
            case UInt8(ascii: "r"): bytes.append(13)
            case UInt8(ascii: "0"): bytes.append(0)
            case UInt8(ascii: "x"):
                let hex = String(decoding: iterator.prefix(2), as: UTF8.self)
                iterator = iterator.dropFirst(2)
                guard hex.count == 2, let value = UInt8(hex, radix: 16) else {
                    throw GoldenFormatError(line: line, message: "'\\x' needs two hex digits")
                }
                bytes.append(value)
            default:
                throw GoldenFormatError(line: line, message: "unknown escape in an (esc) line (use \\\\ \\t \\r \\0 \\xNN)")
            }
        }
        return bytes
    }

    /// How a line of output is written in a case: as is, or with escapes and ` (esc)` when it
    /// holds control characters, invalid UTF-8, or trailing blanks an editor would eat.
    static func escapeIfNeeded(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        let valid = Array(text.utf8) == bytes
        let control = bytes.contains { $0 < 0x20 || $0 == 0x7f }
        let trailing = bytes.last == UInt8(ascii: " ")
        let special = text == "..." || text.hasSuffix(" (esc)") || text.hasSuffix(" (no-eol)") || text == "(no-eol)"
        guard !valid || control || trailing || special else { return text }
        var out = ""
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\\"): out += "\\\\"
            case 9: out += "\\t"
            case 13: out += "\\r"
            case 0: out += "\\0"
            case 0x20...0x7e: out.append(Character(Unicode.Scalar(byte)))
            default:
                // Keep valid multi-byte UTF-8 readable; escape anything else.
                let length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1
                let slice = Array(bytes[index..<min(bytes.count, index + length)])
                if byte >= 0x80, length > 1, let scalar = String(validating: slice, as: UTF8.self) {
                    out += scalar
                    index += length
                    continue
                }
                out += String(format: "\\x%02x", byte)
            }
            index += 1
        }
        return out + " (esc)"
    }
}

/// A mistake in a case file.
struct GoldenFormatError: Error, CustomStringConvertible {
    var line: Int
    var message: String
    var description: String { "line \(line): \(message)" }
}
