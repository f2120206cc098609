import Foundation

/// Runs one golden case in a fresh temporary folder and says how it went; when recording,
/// also returns the case's text with its expected output rewritten.
struct GoldenRunner {
    /// A failure at a line of a case file.
    struct Failure {
        var line: Int
        var message: String
    }

    /// How a case went.
    struct Outcome {
        var path: String
        var failures: [Failure] = []
        /// Why the case stopped early with `skip`, if it did.
        var skipped: String?
        /// The case's new text when recording changed it.
        var recorded: String?
    }

    let binary: String
    /// Whether to rewrite the expected output (`RECORD_GOLDEN=1`).
    let recording: Bool
    /// How long one step may run.
    let timeout: TimeInterval
    /// Whether to keep the temporary folder of a failed case (`GOLDEN_KEEP=1`).
    let keepFailed: Bool

    /// Runs the case at `path`.
    func run(_ path: String) -> Outcome {
        var outcome = Outcome(path: path)
        let script: GoldenScript
        do {
            script = try GoldenScript(String(contentsOfFile: path, encoding: .utf8))
        } catch let error as GoldenFormatError {
            outcome.failures.append(Failure(line: error.line, message: error.message))
            return outcome
        } catch {
            outcome.failures.append(Failure(line: 1, message: "cannot read the case: \(error)"))
            return outcome
        }
        let base = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("coven-golden-\(UUID().uuidString.prefix(8))")
        let work = base.resolvingSymlinksInPath().path
        var state: State
        do {
            for folder in ["", "/home", "/tmp"] {
                try FileManager.default.createDirectory(atPath: work + folder, withIntermediateDirectories: true)
            }
            for file in script.files {
                let target = URL(fileURLWithPath: work).appendingPathComponent(file.path)
                try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
                try Data(file.content.utf8).write(to: target)
            }
            state = State(
                environment: GoldenEnvironment.make(work: work, binary: binary), directory: work,
                normalizer: GoldenNormalizer(workPaths: [work, base.path]))
        } catch {
            outcome.failures.append(Failure(line: 1, message: "cannot set up \(work): \(error)"))
            return outcome
        }
        var replacements: [(range: Range<Int>, lines: [String])] = []
        for step in script.steps {
            do {
                guard try conditionsHold(step, state) else { continue }
                if let replacement = try execute(step, &state, &outcome) {
                    replacements.append(replacement)
                }
                if outcome.skipped != nil { break }
            } catch let failure as StepFailure {
                outcome.failures.append(Failure(line: step.line, message: failure.message))
                break
            } catch {
                outcome.failures.append(Failure(line: step.line, message: "\(error)"))
                break
            }
        }
        if recording, !replacements.isEmpty {
            var lines = script.lines
            for replacement in replacements.sorted(by: { $0.range.lowerBound > $1.range.lowerBound }) {
                lines.replaceSubrange(replacement.range, with: replacement.lines)
            }
            outcome.recorded = lines.joined(separator: "\n") + "\n"
        }
        if outcome.failures.isEmpty || !keepFailed {
            try? FileManager.default.removeItem(atPath: work)
        } else {
            outcome.failures.append(Failure(line: 1, message: "kept the case's folder: \(work)"))
        }
        return outcome
    }

    // MARK: - Steps

    /// What the steps share: variables, the folder, pending stdin, the last result, rules.
    struct State {
        var environment: [String: String]
        var directory: String
        var normalizer: GoldenNormalizer
        var stdin: String?
        var last: ProcessResult?
    }

    /// A step that did not do what the case says.
    struct StepFailure: Error {
        static let outputPrefix = "output differs"
        var message: String
    }

    private func conditionsHold(_ step: GoldenScript.Step, _ state: State) throws -> Bool {
        for condition in step.conditions {
            let holds: Bool
            switch condition.kind {
            case "exec": holds = Processes.which(condition.value, path: state.environment["PATH"] ?? "") != nil
            default: holds = state.environment[condition.value] != nil
            }
            if holds == condition.negated { return false }
        }
        return true
    }

    /// Runs one step; returns the replacement of its expected lines when recording changed them.
    private func execute(_ step: GoldenScript.Step, _ state: inout State, _ outcome: inout Outcome) throws -> (range: Range<Int>, lines: [String])? {
        let words = try step.words.map { try GoldenScript.expand($0, state.environment, line: step.line) }
        switch step.name {
        case "coven", "exec":
            return try runProgram(step, words, &state)
        case "env":
            for word in words {
                guard let equals = word.firstIndex(of: "="), equals != word.startIndex else {
                    throw StepFailure(message: "env takes NAME=VALUE, not '\(word)'")
                }
                state.environment[String(word[..<equals])] = String(word[word.index(after: equals)...])
            }
        case "unset":
            for word in words { state.environment[word] = nil }
        case "cd":
            guard words.count == 1 else { throw StepFailure(message: "cd takes one folder") }
            let target = resolve(words[0], state)
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: target, isDirectory: &isFolder), isFolder.boolValue else {
                throw StepFailure(message: "cd: no folder '\(words[0])'")
            }
            state.directory = target
        case "stdin":
            guard words.count == 1 else { throw StepFailure(message: "stdin takes one file") }
            state.stdin = resolve(words[0], state)
        case "cmp":
            guard words.count == 2 else { throw StepFailure(message: "cmp takes two files") }
            let same = try contents(words[0], state) == contents(words[1], state)
            if same == step.expectFailure {
                let diff = same ? "" : "\n" + Diff.render(expected: try contents(words[1], state), actual: try contents(words[0], state))
                throw StepFailure(message: same ? "cmp: '\(words[0])' and '\(words[1])' are the same" : "cmp: '\(words[0])' differs from '\(words[1])'\(diff)")
            }
        case "capture":
            guard words.count == 1, let last = state.last else { throw StepFailure(message: "capture takes a NAME and follows a coven or exec line") }
            var text = last.stdoutText
            if text.hasSuffix("\n") { text.removeLast() }
            state.environment[words[0]] = text
        case "normalize":
            if words.count == 1, let rule = GoldenNormalizer.namedRules[words[0]] {
                state.normalizer.caseRules.append(rule)
            } else if words.count == 2 {
                state.normalizer.caseRules.append(try GoldenNormalizer.caseRule(words[0], words[1]))
            } else {
                throw StepFailure(message: "normalize takes a rule name (\(GoldenNormalizer.namedRules.keys.sorted().joined(separator: ", "))) or a REGEX and a REPLACEMENT")
            }
        case "skip":
            outcome.skipped = words.joined(separator: " ")
        default:
            throw StepFailure(message: "unknown command '\(step.name)'")
        }
        return nil
    }

    private func runProgram(_ step: GoldenScript.Step, _ words: [String], _ state: inout State) throws -> (range: Range<Int>, lines: [String])? {
        let executable: String
        var arguments = words
        if step.name == "coven" {
            executable = binary
        } else {
            guard let program = words.first else { throw StepFailure(message: "exec needs a program") }
            guard let found = Processes.which(program, path: state.environment["PATH"] ?? "") else {
                throw StepFailure(message: "exec: no program '\(program)' on PATH")
            }
            executable = found
            arguments.removeFirst()
        }
        let stdin = state.stdin
        state.stdin = nil
        let result = try Processes.run(executable, arguments, environment: state.environment, directory: state.directory,
                                       stdin: stdin, timeout: timeout)
        state.last = result
        let stdout = state.normalizer.apply(Array(result.stdout))
        let stderr = state.normalizer.apply(Array(result.stderr))
        let shown = "\n--- stdout\n\(String(decoding: stdout, as: UTF8.self))--- stderr\n\(String(decoding: stderr, as: UTF8.self))"
        if result.timedOut {
            throw StepFailure(message: "killed after \(Int(timeout))s" + shown)
        }
        let statusOK = step.expectFailure ? result.status != 0 && (step.expectedStatus.map { $0 == result.status } ?? true) : result.status == 0
        if !statusOK {
            let wanted = step.expectFailure ? (step.expectedStatus.map { "exit status \($0)" } ?? "a failure") : "success"
            throw StepFailure(message: "expected \(wanted), got exit status \(result.status)" + shown)
        }
        var differences: [String] = []
        if !matches(step.stdout, stdout) { differences.append("stdout:\n" + Diff.render(expected: step.stdout, actual: stdout)) }
        if !matches(step.stderr, stderr) { differences.append("stderr:\n" + Diff.render(expected: step.stderr, actual: stderr)) }
        guard !differences.isEmpty else { return nil }
        if recording {
            let lines = Self.expectedLines(">", stdout, like: step.stdout) + Self.expectedLines("2>", stderr, like: step.stderr)
            return (step.expectationLines, lines)
        }
        throw StepFailure(message: "\(StepFailure.outputPrefix) (make golden-update rewrites it)\n" + differences.joined(separator: "\n"))
    }

    /// Whether normalized output meets an expectation (a prefix of lines when it is open).
    private func matches(_ expectation: GoldenScript.Expectation, _ actual: [UInt8]) -> Bool {
        guard expectation.open else { return expectation.bytes == actual }
        let prefix = expectation.lines.isEmpty ? [] : Array(expectation.lines.joined(separator: [10])) + [10]
        return actual.starts(with: prefix)
    }

    /// The `>`/`2>` lines that expect `actual`; an open expectation stays open over as many
    /// lines as it had.
    static func expectedLines(_ marker: String, _ actual: [UInt8], like old: GoldenScript.Expectation) -> [String] {
        var lines = actual.split(separator: 10, omittingEmptySubsequences: false).map(Array.init)
        let noFinalNewline = !actual.isEmpty && actual.last != 10
        if !noFinalNewline { lines.removeLast() }
        if old.open {
            return Array(lines.prefix(old.lines.count)).map { line($0, marker, last: false) } + [marker + " ..."]
        }
        return lines.enumerated().map { index, bytes in line(bytes, marker, last: noFinalNewline && index == lines.count - 1) }
    }

    private static func line(_ bytes: [UInt8], _ marker: String, last noEOL: Bool) -> String {
        var text = GoldenScript.escapeIfNeeded(bytes)
        if noEOL { text += text.isEmpty ? "(no-eol)" : " (no-eol)" }
        return text.isEmpty ? marker : marker + " " + text
    }

    private func resolve(_ path: String, _ state: State) -> String {
        path.hasPrefix("/") ? path : state.directory + "/" + path
    }

    /// A file's bytes, or the last step's raw `stdout`/`stderr`.
    private func contents(_ name: String, _ state: State) throws -> [UInt8] {
        if name == "stdout" || name == "stderr" {
            guard let last = state.last else { throw StepFailure(message: "cmp \(name): no command ran yet") }
            return Array(name == "stdout" ? last.stdout : last.stderr)
        }
        guard let data = FileManager.default.contents(atPath: resolve(name, state)) else {
            throw StepFailure(message: "cmp: cannot read '\(name)'")
        }
        return Array(data)
    }
}

/// A line diff (longest common subsequence) for failure messages: `-` expected, `+` actual.
enum Diff {
    static func render(expected: GoldenScript.Expectation, actual: [UInt8]) -> String {
        var text = render(expected: expected.bytes, actual: actual)
        if expected.open { text += "  (expected only a prefix: '...')\n" }
        return text
    }

    static func render(expected: [UInt8], actual: [UInt8]) -> String {
        let a = lines(expected), b = lines(actual)
        guard a.count * b.count <= 4_000_000 else {
            return "  (outputs too long to diff: \(a.count) and \(b.count) lines)\n"
        }
        var table = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in stride(from: a.count - 1, through: 0, by: -1) {
            for j in stride(from: b.count - 1, through: 0, by: -1) {
                table[i][j] = a[i] == b[j] ? table[i + 1][j + 1] + 1 : max(table[i + 1][j], table[i][j + 1])
            }
        }
        var out = ""
        var i = 0, j = 0
        while i < a.count || j < b.count {
            if i < a.count, j < b.count, a[i] == b[j] {
                out += "   " + a[i] + "\n"
                i += 1
                j += 1
            } else if i < a.count, j == b.count || table[i + 1][j] >= table[i][j + 1] {
                out += "  -" + a[i] + "\n"
                i += 1
            } else {
                out += "  +" + b[j] + "\n"
                j += 1
            }
        }
        return out
    }

    private static func lines(_ bytes: [UInt8]) -> [String] {
        guard !bytes.isEmpty else { return [] }
        var lines = bytes.split(separator: 10, omittingEmptySubsequences: false).map { GoldenScript.escapeIfNeeded(Array($0)) }
        if bytes.last == 10 { lines.removeLast() } else if !bytes.isEmpty, let last = lines.last { lines[lines.count - 1] = last + " (no-eol)" }
        return lines
    }
}
