import CovenKit
import XCTest

@testable import coven

/// The table-driven parser, through `@testable import` of the executable target (SwiftPM builds
/// an executable module testable, so the parser stays in Sources/coven beside the commands).
final class ParserTests: XCTestCase {
    /// A command table that exercises every shape: a value with choices, a repeatable value, a
    /// short flag, a short option with a value, and a repeating argument after a required one.
    let options = [
        OptionSpec("place", short: "p", value: "WHERE", help: "where", choices: ["cloud", "device-only"]),
        OptionSpec("param", value: "KEY=VALUE", help: "a parameter", repeatable: true),
        OptionSpec("null", short: "z", help: "NUL-terminate"),
        OptionSpec("offset", short: "o", value: "N", help: "where to start"),
    ]
    let arguments = [
        ArgumentSpec("NAMESPACE", help: "the namespace"),
        ArgumentSpec("PATH", help: "paths", optional: true, repeating: true, completion: .file),
    ]

    private func parse(_ words: [String]) throws -> Invocation {
        try Parser.parse(words, options: options, arguments: arguments, command: "stage")
    }

    /// The usage error `words` cause (failing the test when they parse).
    private func usageError(_ words: [String], file: StaticString = #filePath, line: UInt = #line) -> CovenError? {
        do {
            let invocation = try parse(words)
            XCTFail("parsed \(words) as \(invocation)", file: file, line: line)
            return nil
        } catch let error as CovenError {
            XCTAssertEqual(error.code, .usage, file: file, line: line)
            XCTAssertEqual(ExitCodes.code(for: error.code), 2, file: file, line: line)
            return error
        } catch {
            XCTFail("unexpected error \(error)", file: file, line: line)
            return nil
        }
    }

    // MARK: - Forms that parse

    func testLongOptionWithEqualsOrNextWord() throws {
        XCTAssertEqual(try parse(["--place=cloud", "ns"]).value("place"), "cloud")
        XCTAssertEqual(try parse(["--place", "device-only", "ns"]).value("place"), "device-only")
        XCTAssertEqual(try parse(["--offset=", "ns"]).value("offset"), "", "an empty value after '=' is a value")
        XCTAssertEqual(try parse(["--offset", "-5", "ns"]).value("offset"), "-5", "a value may start with '-'")
        XCTAssertEqual(try parse(["--param=a=1", "ns"]).value("param"), "a=1", "only the first '=' splits")
    }

    func testShortOptionsBundleAndTakeAttachedValues() throws {
        let bundled = try parse(["-zq", "ns"])
        XCTAssertTrue(bundled.has("null"))
        XCTAssertTrue(bundled.has("quiet"))
        XCTAssertEqual(try parse(["-o", "12", "ns"]).value("offset"), "12")
        XCTAssertEqual(try parse(["-o12", "ns"]).value("offset"), "12")
        let mixed = try parse(["-zo7", "ns"])
        XCTAssertTrue(mixed.has("null"))
        XCTAssertEqual(mixed.value("offset"), "7")
        let last = try parse(["-zo", "9", "ns"])
        XCTAssertEqual(last.value("offset"), "9")
        XCTAssertEqual(last.arguments, ["ns"])
        XCTAssertEqual(try parse(["-pcloud", "ns"]).value("place"), "cloud")
    }

    func testDoubleDashEndsOptionsAndDashIsAnArgument() throws {
        let invocation = try parse(["ns", "--", "--place", "-z", "-"])
        XCTAssertEqual(invocation.arguments, ["ns", "--place", "-z", "-"])
        XCTAssertFalse(invocation.has("place"))
        XCTAssertEqual(try parse(["ns", "-"]).arguments, ["ns", "-"])
        XCTAssertEqual(try parse(["ns", "--", "--"]).arguments, ["ns", "--"], "a second '--' is an argument")
    }

    func testRepeatedOptions() throws {
        XCTAssertEqual(try parse(["--param", "a=1", "ns", "--param=b=2"]).values("param"), ["a=1", "b=2"])
        XCTAssertEqual(try parse(["-z", "-z", "ns"]).values("null"), ["", ""], "a repeated flag is harmless")
        XCTAssertEqual(try parse(["--place", "cloud", "--place=cloud", "ns"]).value("place"), "cloud",
                       "the same value twice is not a conflict")
    }

    func testGlobalOptionsAnywhereBeforeDoubleDash() throws {
        let invocation = try parse(["ns", "--db", "x.db", "a", "--json", "-q", "b", "--no-wait"])
        XCTAssertEqual(invocation.value("db"), "x.db")
        XCTAssertTrue(invocation.has("json") && invocation.has("quiet") && invocation.has("no-wait"))
        XCTAssertEqual(invocation.arguments, ["ns", "a", "b"])
    }

    func testHelpSkipsTheArgumentChecks() throws {
        XCTAssertTrue(try parse(["--help"]).has("help"))
        XCTAssertTrue(try parse(["-h", "a", "b"]).has("help"))
    }

    func testRepeatingArgumentTakesTheRest() throws {
        XCTAssertEqual(try parse(["ns", "a", "b", "c"]).arguments, ["ns", "a", "b", "c"])
        XCTAssertEqual(try parse(["ns"]).arguments, ["ns"])
    }

    // MARK: - Usage errors

    func testUnknownOptionsSuggestOrPointToHelp() {
        let typo = usageError(["--plac", "cloud", "ns"])
        XCTAssertEqual(typo?.message, "unknown option '--plac'")
        XCTAssertEqual(typo?.hint, "did you mean '--place'?")
        let unknown = usageError(["--frobnicate", "ns"])
        XCTAssertEqual(unknown?.hint, "see 'coven stage --help'")
        XCTAssertEqual(usageError(["-x", "ns"])?.message, "unknown option '-x'")
        XCTAssertEqual(usageError(["-zx", "ns"])?.message, "unknown option '-x'", "a bundle names the letter")
        XCTAssertEqual(usageError(["---", "ns"])?.message, "unknown option '---'")
        XCTAssertEqual(usageError(["--=x", "ns"])?.message, "unknown option '--'")
    }

    func testMissingValues() {
        XCTAssertEqual(usageError(["ns", "--offset"])?.message, "option '--offset' needs a value (N)")
        XCTAssertEqual(usageError(["ns", "-o"])?.message, "option '-o' needs a value (N)")
        XCTAssertEqual(usageError(["ns", "-zo"])?.message, "option '-o' needs a value (N)")
        XCTAssertEqual(usageError(["ns", "--db"])?.message, "option '--db' needs a value (PATH)")
    }

    func testFlagsRefuseValues() {
        XCTAssertEqual(usageError(["--null=1", "ns"])?.message, "option '--null' takes no value")
        XCTAssertEqual(usageError(["--json=yes", "ns"])?.message, "option '--json' takes no value")
    }

    func testConflictingValues() {
        XCTAssertEqual(usageError(["--place", "cloud", "--place", "device-only", "ns"])?.message,
                       "option '--place' is given twice")
    }

    func testChoices() {
        XCTAssertEqual(usageError(["--place", "moon", "ns"])?.message,
                       "option '--place' takes 'cloud' or 'device-only', not 'moon'")
        XCTAssertEqual(usageError(["--place=", "ns"])?.message,
                       "option '--place' takes 'cloud' or 'device-only', not ''")
        let shells = [ArgumentSpec("SHELL", help: "", choices: ["bash", "zsh", "fish"])]
        XCTAssertThrowsError(try Parser.parse(["tcsh"], options: [], arguments: shells, command: "completions")) { error in
            XCTAssertEqual((error as? CovenError)?.message, "SHELL takes 'bash', 'zsh' or 'fish', not 'tcsh'")
        }
    }

    func testArgumentCounts() {
        let missing = usageError([])
        XCTAssertEqual(missing?.message, "missing argument NAMESPACE")
        XCTAssertEqual(missing?.hint, "see 'coven stage --help'")
        let one = [ArgumentSpec("FILE", help: "")]
        XCTAssertThrowsError(try Parser.parse(["a", "b"], options: [], arguments: one, command: "cat")) { error in
            XCTAssertEqual((error as? CovenError)?.message, "unexpected argument 'b'")
        }
        XCTAssertThrowsError(try Parser.parse(["a"], options: [], arguments: [], command: "status")) { error in
            XCTAssertEqual((error as? CovenError)?.message, "unexpected argument 'a'")
        }
    }

    func testIntegerValues() throws {
        XCTAssertEqual(try parse(["-o", "42", "ns"]).integer("offset"), 42)
        XCTAssertNil(try parse(["ns"]).integer("offset"))
        XCTAssertThrowsError(try parse(["-o", "4k", "ns"]).integer("offset")) { error in
            XCTAssertEqual((error as? CovenError)?.message, "option '--offset' takes a whole number, not '4k'")
        }
    }

    // MARK: - Words before the command

    func testLeadingGlobalOptionsAreSplitFromTheCommand() throws {
        let split = try Parser.splitLeadingGlobals(["--db", "x.db", "--json", "status", "-z", "--db", "y"])
        XCTAssertEqual(split.globals, ["--db", "x.db", "--json"])
        XCTAssertEqual(split.rest, ["status", "-z", "--db", "y"])
        XCTAssertEqual(try Parser.splitLeadingGlobals(["--db=x", "-qh"]).rest, [])
        XCTAssertEqual(try Parser.splitLeadingGlobals(["-", "x"]).rest, ["-", "x"])
        XCTAssertThrowsError(try Parser.splitLeadingGlobals(["-z", "status"])) { error in
            XCTAssertEqual((error as? CovenError)?.message, "unknown option '-z'")
            XCTAssertEqual((error as? CovenError)?.hint, "see 'coven --help'")
        }
        XCTAssertThrowsError(try Parser.splitLeadingGlobals(["--db"]))
    }

    func testSuggestions() {
        XCTAssertEqual(Parser.suggestion(for: "stauts", among: ["status", "stage"]), "status")
        XCTAssertEqual(Parser.suggestion(for: "complet", among: ["completions", "cat"]), "completions")
        XCTAssertNil(Parser.suggestion(for: "s", among: ["status", "stage"]), "an ambiguous prefix suggests nothing")
        XCTAssertNil(Parser.suggestion(for: "zzzzzz", among: ["status"]))
        XCTAssertEqual(Parser.suggestion(for: "snyc", among: ["sync", "sql", "stage"]), "sync", "a swap of two letters is one edit")
        XCTAssertEqual(Parser.suggestion(for: "SYNC", among: ["sync", "sql"]), "sync", "case aside")
        XCTAssertEqual(Parser.editDistance("ab", "ba"), 1)
        XCTAssertEqual(Parser.editDistance("abc", "ca"), 3)
        XCTAssertEqual(Parser.alternatives(["a"]), "'a'")
        XCTAssertEqual(Parser.alternatives(["a", "b", "c"]), "'a', 'b' or 'c'")
    }

    // MARK: - Bad input never traps

    /// Thousands of random command lines from a vocabulary of awkward words: each parses or
    /// throws a usage error, and nothing traps.
    func testRandomWordsParseOrFailAsUsage() {
        let vocabulary = [
            "", "-", "--", "---", "-=", "--=", "=", "-z", "-zz", "-zo", "-o", "-o1", "-p", "-pcloud", "--place",
            "--place=", "--place=cloud", "--param", "--param=a=b", "--offset", "--offset=-1", "--null=", "--db",
            "--json", "-h", "--help", "-q", "ns", "a b", "é", "--é", "-é", "🙂", "-🙂", "\u{0}", "--\u{0}", "-x",
        ]
        var random = SplitMix64(seed: 0xC0FE)
        for _ in 0..<5000 {
            let count = Int(random.next() % 7)
            let words = (0..<count).map { _ in vocabulary[Int(random.next() % UInt64(vocabulary.count))] }
            do {
                _ = try parse(words)
            } catch let error as CovenError {
                XCTAssertEqual(error.code, .usage, "\(words)")
                XCTAssertFalse(error.message.hasSuffix("."), "\(words): \(error.message)")
                XCTAssertNotNil(error.hint, "\(words): \(error.message)")
            } catch {
                XCTFail("\(words): \(error)")
            }
        }
    }

    // MARK: - Help layout

    func testHelpRowsWrapAtEightyColumns() {
        let row = Help.row("--db PATH", String(repeating: "word ", count: 30))
        for line in row.split(separator: "\n") {
            XCTAssertLessThanOrEqual(line.count, Help.width, String(line))
        }
        XCTAssertTrue(Help.row(String(repeating: "x", count: 30), "right").hasPrefix("  " + String(repeating: "x", count: 30) + "\n"))
        XCTAssertEqual(Help.wrap("", width: 10), [""])
        XCTAssertEqual(Help.wrap("a b c", width: 3), ["a b", "c"])
        XCTAssertEqual(Help.wrap("abcdefgh", width: 3), ["abcdefgh"], "a long word stays whole")
    }
}

/// A small deterministic generator, so a failing random case can be replayed.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension ParserTests {
    /// The JSON lines `stage --files-from --json` writes by hand escape as Foundation does.
    func testJSONStringEscapesAsTheSerializer() throws {
        var samples = (0..<0x80).map { String(UnicodeScalar(UInt8($0))) }
        samples += ["music/caf\\xE9.flac", "two\nlines", "quote \" and \\ back", "émoji 🎵 / slash", ""]
        for sample in samples {
            XCTAssertEqual(JSONText.string(sample), try JSONText.render(sample), sample.debugDescription)
        }
    }

    /// `--user [PATH]`: an option whose value is optional takes none before another option.
    func testOptionalValueIsLeftOutBeforeAnotherOption() throws {
        let invocation = try Parser.parse(["--user", "--namespace", "music", "--files-from", "-"], options: StageCommand.options, arguments: StageCommand.arguments, command: "stage")
        XCTAssertEqual(invocation.value("user"), "")
        XCTAssertEqual(invocation.value("namespace"), "music")
        let given = try Parser.parse(["--user", "song.flac", "--namespace", "music"], options: StageCommand.options, arguments: StageCommand.arguments, command: "stage")
        XCTAssertEqual(given.value("user"), "song.flac")
    }
}
