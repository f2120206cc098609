import CovenKit
import Foundation

// MARK: - Global options

/// Options every command takes, parsed wherever they appear before `--` (and before the command
/// word: `coven --db x.db status`).
enum GlobalOptions {
    static let specs: [OptionSpec] = [
        OptionSpec("db", value: "PATH", help: "the device database (default: $COVEN_DB, else $XDG_DATA_HOME/coven/device.db)", completion: .file),
        OptionSpec("json", help: "print data and errors as JSON"),
        OptionSpec("quiet", short: "q", help: "print nothing but data and errors"),
        OptionSpec("no-wait", help: "fail with 'busy' instead of waiting for another coven on this device"),
        OptionSpec("help", short: "h", help: "show this help"),
    ]
}

// MARK: - The parser

/// Parses a command's words against its option table.
///
/// Long options take `--name value` or `--name=value`; short ones `-x value`, `-xVALUE`, and
/// flags bundle (`-zq`). `--` ends options; a lone `-` is an argument (stdin). Every failure is a
/// ``CovenError`` with code `usage` and a hint; no input makes it trap.
enum Parser {
    /// Parses `words` (what follows the command word) for `command`.
    ///
    /// - Parameters:
    ///   - words: the words after the command name.
    ///   - options: the command's own options; ``GlobalOptions/specs`` are added.
    ///   - arguments: the command's positional arguments, checked unless `--help` was given.
    ///   - command: the command's name, for hints (empty for the words before any command).
    /// - Throws: ``CovenError`` `.usage` for an unknown option, a missing or refused value, a
    ///   missing or unexpected argument.
    static func parse(_ words: [String], options: [OptionSpec], arguments: [ArgumentSpec], command: String) throws -> Invocation {
        var scanner = Scanner(table: options + GlobalOptions.specs, command: command)
        var invocation = Invocation()
        var index = 0
        var optionsEnded = false
        while index < words.count {
            let word = words[index]
            index += 1
            if optionsEnded || word == "-" || !word.hasPrefix("-") {
                invocation.arguments.append(word)
            } else if word == "--" {
                optionsEnded = true
            } else {
                try scanner.option(word, words: words, index: &index, into: &invocation)
            }
        }
        if invocation.has("help") { return invocation }
        try check(invocation.arguments, against: arguments, command: command)
        return invocation
    }

    /// Splits the global options written before the command word from the rest:
    /// `--db x.db --json status -z` gives `(["--db", "x.db", "--json"], ["status", "-z"])`.
    ///
    /// The leading words are checked (an unknown option is a usage error) but not interpreted:
    /// the caller hands them to the command's own parse.
    static func splitLeadingGlobals(_ words: [String]) throws -> (globals: [String], rest: [String]) {
        var scanner = Scanner(table: GlobalOptions.specs, command: "")
        var scratch = Invocation()
        var index = 0
        while index < words.count {
            let word = words[index]
            guard word.hasPrefix("-"), word != "-", word != "--" else { break }
            index += 1
            try scanner.option(word, words: words, index: &index, into: &scratch)
        }
        return (Array(words[..<index]), Array(words[index...]))
    }

    /// Checks positional words against the declared arguments.
    private static func check(_ values: [String], against arguments: [ArgumentSpec], command: String) throws {
        let required = arguments.filter { !$0.optional }
        if values.count < required.count {
            throw CovenError(.usage, "missing argument \(required[values.count].name)", hint: seeHelp(command))
        }
        if !arguments.contains(where: { $0.repeating }), values.count > arguments.count {
            throw CovenError(.usage, "unexpected argument '\(values[arguments.count])'", hint: seeHelp(command))
        }
        guard let last = arguments.last else { return }
        for (position, value) in values.enumerated() {
            let spec = position < arguments.count ? arguments[position] : last
            if !spec.choices.isEmpty && !spec.choices.contains(value) {
                throw CovenError(.usage, "\(spec.name) takes \(alternatives(spec.choices)), not '\(value)'", hint: seeHelp(command))
            }
        }
    }

    /// `see 'coven stage --help'`, or `see 'coven --help'` outside a command.
    static func seeHelp(_ command: String) -> String {
        command.isEmpty ? "see 'coven --help'" : "see 'coven \(command) --help'"
    }

    /// `'a', 'b' or 'c'`.
    static func alternatives(_ choices: [String]) -> String {
        let quoted = choices.map { "'\($0)'" }
        guard quoted.count > 1, let last = quoted.last else { return quoted.first ?? "nothing" }
        return quoted.dropLast().joined(separator: ", ") + " or " + last
    }

    /// The one candidate `word` begins, or else the candidate closest to `word` by edit
    /// distance when it is close enough to be a typo.
    static func suggestion(for word: String, among candidates: [String]) -> String? {
        let extensions = candidates.filter { !word.isEmpty && $0.hasPrefix(word) }
        if extensions.count == 1 { return extensions[0] }
        // Case aside (`STATUS`), and a swap of two letters (`snyc`) counts as one edit.
        let scored = candidates.map { ($0, editDistance(word.lowercased(), $0.lowercased())) }
        guard let best = scored.min(by: { $0.1 < $1.1 }) else { return nil }
        return best.1 <= max(1, min(word.count, best.0.count) / 3) ? best.0 : nil
    }

    /// Edit distance over characters, counting a swap of two neighbours as one edit (optimal
    /// string alignment: the typo `snyc` is one edit from `sync`, not two).
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var before = Array(0...b.count)
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], before[j - 2] + 1)
                }
            }
            before = previous
            previous = current
        }
        return previous[b.count]
    }
}

// MARK: - One option word

extension Parser {
    /// Reads one option word (long, or a bundle of short ones) against a table.
    private struct Scanner {
        let table: [OptionSpec]
        let command: String

        /// Reads `word` (and its value from `words[index]` when it takes one).
        mutating func option(_ word: String, words: [String], index: inout Int, into invocation: inout Invocation) throws {
            if word.hasPrefix("--") {
                try long(word, words: words, index: &index, into: &invocation)
            } else {
                try shorts(word, words: words, index: &index, into: &invocation)
            }
        }

        private func long(_ word: String, words: [String], index: inout Int, into invocation: inout Invocation) throws {
            let body = word.dropFirst(2)
            let name: String
            var inline: String?
            if let equals = body.firstIndex(of: "=") {
                name = String(body[..<equals])
                inline = String(body[body.index(after: equals)...])
            } else {
                name = String(body)
            }
            guard let spec = table.first(where: { $0.long == name }) else {
                let hint = Parser.suggestion(for: name, among: table.map(\.long)).map { "did you mean '--\($0)'?" }
                throw CovenError(.usage, "unknown option '--\(name)'", hint: hint ?? Parser.seeHelp(command))
            }
            if spec.value == nil {
                if inline != nil { throw CovenError(.usage, "option '--\(name)' takes no value", hint: Parser.seeHelp(command)) }
                try add(spec, "", to: &invocation)
            } else if let inline {
                try add(spec, inline, to: &invocation)
            } else if spec.value?.hasPrefix("[") == true, index >= words.count || words[index].hasPrefix("-") {
                // An optional value (`--user [PATH]`): given alone, or before another option.
                try add(spec, "", to: &invocation)
            } else {
                guard index < words.count else { throw missingValue(spec, written: "--\(name)") }
                try add(spec, words[index], to: &invocation)
                index += 1
            }
        }

        private func shorts(_ word: String, words: [String], index: inout Int, into invocation: inout Invocation) throws {
            var letters = Substring(word.dropFirst())
            while let letter = letters.first {
                letters = letters.dropFirst()
                guard let spec = table.first(where: { $0.short == String(letter) }) else {
                    throw CovenError(.usage, "unknown option '-\(letter)'", hint: Parser.seeHelp(command))
                }
                guard spec.value != nil else {
                    try add(spec, "", to: &invocation)
                    continue
                }
                if !letters.isEmpty {
                    try add(spec, String(letters), to: &invocation)
                } else {
                    guard index < words.count else { throw missingValue(spec, written: "-\(letter)") }
                    try add(spec, words[index], to: &invocation)
                    index += 1
                }
                return
            }
        }

        private func missingValue(_ spec: OptionSpec, written: String) -> CovenError {
            CovenError(.usage, "option '\(written)' needs a value (\(spec.value ?? "VALUE"))", hint: Parser.seeHelp(command))
        }

        private func add(_ spec: OptionSpec, _ value: String, to invocation: inout Invocation) throws {
            if !spec.repeatable, spec.value != nil, let earlier = invocation.options[spec.long]?.last, earlier != value {
                throw CovenError(.usage, "option '--\(spec.long)' is given twice", hint: Parser.seeHelp(command))
            }
            if !spec.choices.isEmpty, !spec.choices.contains(value) {
                throw CovenError(.usage, "option '--\(spec.long)' takes \(Parser.alternatives(spec.choices)), not '\(value)'", hint: Parser.seeHelp(command))
            }
            invocation.options[spec.long, default: []].append(value)
        }
    }
}
