import Foundation

/// The fish completion script: one generated table (`__coven_takes_value`), a fixed reader of
/// the tokens before the cursor (`__coven_words`, mirroring coven's parser), and one `complete`
/// line per command, option and positional argument.
///
/// Needs fish 3.1 or later (`complete -F`, `string split0`).
struct FishCompletions {
    let dump: RegistryDump

    func render() -> String {
        let commands = dump.completableCommands
        var text = """
        # fish completion for \(dump.name)
        # \(Completions.banner(.fish, dump))
        # Install: copy to ~/.config/fish/completions/coven.fish (or to a directory of
        # $fish_complete_path, such as /usr/share/fish/vendor_completions.d).

        # Whether OPTION (--long or -s) of COMMAND leaves its value to the next word.
        function __coven_takes_value --argument-names command option
            switch $option
                case \(valuePatterns(dump.globalOptions) ?? "''")
                    return 0
            end
            switch $command

        """
        for command in commands {
            guard let patterns = valuePatterns(command.options) else { continue }
            text += "        case \(quote(command.name))\n"
            text += "            switch $option\n                case \(patterns)\n                    return 0\n            end\n"
        }
        text += """
            end
            return 1
        end

        \(Self.driver)
        complete -c coven -f

        # Commands.

        """
        for command in commands {
            text += "complete -c coven -n __coven_needs_command -a \(quote(command.name)) -d \(quote(command.abstract))\n"
        }
        text += "\n# Global options, before or after the command.\n"
        for option in dump.globalOptions {
            text += "complete -c coven" + optionFlags(option) + "\n"
        }
        text += "complete -c coven -n __coven_needs_command" + optionFlags(Completions.versionOption) + "\n"
        for command in commands {
            let condition = quote("__coven_using \(command.name)")
            var lines: [String] = command.options.map { "complete -c coven -n \(condition)" + optionFlags($0) }
            for (index, argument) in command.arguments.enumerated() {
                guard let values = argumentFlags(argument.completion, argument.choices) else { continue }
                let more = argument.repeating && index == command.arguments.count - 1 ? " +" : ""
                lines.append("complete -c coven -n \(quote("__coven_at_argument \(command.name) \(index)\(more)"))" + values)
            }
            guard !lines.isEmpty else { continue }
            text += "\n# coven \(command.name)\n" + lines.joined(separator: "\n") + "\n"
        }
        return text
    }

    /// `--place -p` for the options taking a value, or nil when none does.
    private func valuePatterns(_ options: [OptionSpec]) -> String? {
        let words = options.filter { $0.value != nil }.flatMap { ["--" + $0.long] + ($0.short.map { ["-" + $0] } ?? []) }
        return words.isEmpty ? nil : words.map(quote).joined(separator: " ")
    }

    /// ` -s q -l quiet -d '…'` and how the value completes.
    private func optionFlags(_ option: OptionSpec) -> String {
        var flags = option.short.map { " -s \(quote($0))" } ?? ""
        flags += " -l \(quote(option.long))"
        if option.value != nil {
            switch (option.completion, option.choices.isEmpty) {
            case (_, false): flags += " -x -a \(quote(option.choices.joined(separator: " ")))"
            case (.file, true): flags += " -r -F"
            case (.directory, true): flags += " -x -a \(quote(Self.directories))"
            case (.fileID, true): flags += " -x -a \(quote("(__coven_file_ids)"))"
            case (.choice, true), (.none, true): flags += " -x"
            }
        }
        return flags + " -d \(quote(option.help))"
    }

    /// How a positional argument completes, or nil when it completes nothing.
    private func argumentFlags(_ completion: Completion, _ choices: [String]) -> String? {
        if !choices.isEmpty { return " -a \(quote(choices.joined(separator: " ")))" }
        switch completion {
        case .file: return " -F"
        case .directory: return " -a \(quote(Self.directories))"
        case .fileID: return " -a \(quote("(__coven_file_ids)"))"
        case .choice, .none: return nil
        }
    }

    private static let directories = "(__fish_complete_directories (commandline -ct))"

    /// Single-quotes a word for fish.
    private func quote(_ word: String) -> String {
        "'" + word.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    /// The token reader and the conditions, the same for every registry.
    static let driver = #"""
    # Reads the tokens before the cursor as coven's parser does and prints the command word, then
    # each positional argument after it, one a line.
    function __coven_words
        set -l tokens (commandline -opc)
        set -e tokens[1]
        set -l command
        set -l expect 0
        set -l ended 0
        for token in $tokens
            if test $expect = 1
                set expect 0
            else if test $ended = 0; and test "$token" = --
                set ended 1
            else if test $ended = 0; and string match -qr -- '^-.' $token
                string match -q -- '*=*' $token; and continue
                if string match -q -- '--*' $token
                    __coven_takes_value "$command" $token; and set expect 1
                else
                    # Bundled short options: the first one taking a value takes the rest of the
                    # word, or the next word when it is last.
                    set -l letters (string split '' -- (string sub -s 2 -- $token))
                    for i in (seq (count $letters))
                        if __coven_takes_value "$command" -$letters[$i]
                            test $i -eq (count $letters); and set expect 1
                            break
                        end
                    end
                end
            else
                test -z "$command"; and set command $token
                echo $token
            end
        end
    end

    # Whether no command word is before the cursor.
    function __coven_needs_command
        test (count (__coven_words)) -eq 0
    end

    # Whether COMMAND is the command word.
    function __coven_using --argument-names command
        set -l words (__coven_words)
        test (count $words) -gt 0; and test "$words[1]" = "$command"
    end

    # Whether the cursor is at positional argument INDEX (from 0) of COMMAND; with a third
    # word "+", at INDEX or after it (a repeating last argument).
    function __coven_at_argument --argument-names command index more
        set -l words (__coven_words)
        test (count $words) -gt 0; and test "$words[1]" = "$command"; or return 1
        set -l position (math (count $words) - 1)
        if test "$more" = +
            test $position -ge $index
        else
            test $position -eq $index
        end
    end

    # The file ids of the device named by --db (else COVEN_DB, else the default), one a line;
    # nothing when coven cannot read them.
    function __coven_file_ids
        set -l db
        set -l next 0
        for token in (commandline -opc)
            if test $next = 1
                set db $token
                set next 0
            else if test "$token" = --db
                set next 1
            else if string match -q -- '--db=*' $token
                set db (string replace -- '--db=' '' $token)
            end
        end
        if test -n "$db"
            set db (string replace -r -- '^~/' "$HOME/" $db)
            command coven sql --db $db -z 'SELECT id FROM coven_files' 2>/dev/null | string split0
        else
            command coven sql -z 'SELECT id FROM coven_files' 2>/dev/null | string split0
        end
    end

    """#
}
