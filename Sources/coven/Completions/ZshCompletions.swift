import Foundation

/// The zsh completion script: `_coven` completes global options and the command word with
/// `_arguments -C`, then hands the rest to one `_coven_command_NAME` function per command.
///
/// It works both autoloaded from `$fpath` (the `#compdef` line) and sourced after `compinit`
/// (the last lines call `compdef`).
struct ZshCompletions {
    let dump: RegistryDump

    func render() -> String {
        let commands = dump.completableCommands
        var text = """
        #compdef \(dump.name)
        # zsh completion for \(dump.name)
        # \(Completions.banner(.zsh, dump))
        # Install: put this file, named _coven, in a directory of $fpath (for example
        # /usr/local/share/zsh/site-functions), or source it after compinit.

        _coven() {
            local curcontext=$curcontext state line ret=1
            local -A opt_args
            _arguments -C -s -S \\

        """
        for spec in (dump.globalOptions + [Completions.versionOption]).flatMap(optionSpecs) {
            text += "        \(spec) \\\n"
        }
        text += """
                '(-)1: :_coven_commands' \\
                '(-)*:: :->command' && ret=0
            if [[ $state == command ]]; then
                local _coven_db=${opt_args[--db]}
                curcontext=${curcontext%:*:*}:coven-$words[1]:
                case $words[1] in

        """
        for command in commands {
            text += "            (\(quote(command.name))) \(function(command)) && ret=0 ;;\n"
        }
        text += """
                esac
            fi
            return ret
        }

        _coven_commands() {
            local -a commands=(

        """
        for command in commands {
            text += "        \(quote(command.name + ":" + command.abstract))\n"
        }
        text += """
            )
            _describe -t commands 'coven command' commands
        }


        """
        for command in commands {
            text += "\(function(command))() {\n    _arguments -s -S"
            let specs = dump.optionTable(command).flatMap(optionSpecs) + argumentSpecs(command.arguments)
            for spec in specs { text += " \\\n        \(spec)" }
            text += "\n}\n\n"
        }
        text += Self.driver
        return text
    }

    /// The completion function of a command: `_coven_command_upload_worker`.
    private func function(_ command: RegistryDump.CommandInfo) -> String {
        "_coven_command_" + command.name.replacingOccurrences(of: "-", with: "_")
    }

    /// The `_arguments` specs of one option, already quoted for the script.
    private func optionSpecs(_ option: OptionSpec) -> [String] {
        let description = "[" + escapeDescription(option.help) + "]"
        var value = ""
        if let placeholder = option.value {
            value = ":" + escapeMessage(placeholder) + ":" + action(option.completion, option.choices)
        }
        let star = option.repeatable ? "*" : ""
        let long = "--" + option.long + (option.value == nil ? "" : "=")
        guard let short = option.short else {
            return [quote(star + long + description + value)]
        }
        let shortForm = "-" + short + (option.value == nil ? "" : "+")
        let exclusion = option.repeatable ? "*" : "(-\(short) --\(option.long))"
        return [quote(exclusion) + "{" + shortForm + "," + long + "}" + quote(description + value)]
    }

    /// `'1:SHELL:(bash zsh fish)'`, `'2::NAME:_files'`, `'*:FILE:_coven_file_ids'`.
    private func argumentSpecs(_ arguments: [ArgumentSpec]) -> [String] {
        arguments.enumerated().map { index, argument in
            let message = escapeMessage(argument.name) + ":" + action(argument.completion, argument.choices)
            if argument.repeating && index == arguments.count - 1 {
                return quote("*:" + message)
            }
            return quote("\(index + 1):" + (argument.optional ? ":" : "") + message)
        }
    }

    /// The `_arguments` action for a value.
    private func action(_ completion: Completion, _ choices: [String]) -> String {
        if !choices.isEmpty { return "(" + choices.map(escapeChoice).joined(separator: " ") + ")" }
        switch completion {
        case .file: return "_files"
        case .directory: return "_path_files -/"
        case .fileID: return "_coven_file_ids"
        case .choice, .none: return " "
        }
    }

    private func escapeDescription(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\")
            .replacingOccurrences(of: "[", with: "\\[")
            .replacingOccurrences(of: "]", with: "\\]")
    }

    private func escapeMessage(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ":", with: "\\:")
    }

    private func escapeChoice(_ text: String) -> String {
        var escaped = ""
        for character in text {
            if " ()\\:".contains(character) { escaped.append("\\") }
            escaped.append(character)
        }
        return escaped
    }

    /// Single-quotes a word for zsh.
    private func quote(_ word: String) -> String {
        "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// File ids and the registration, the same for every registry.
    static let driver = #"""
    # The file ids of the device named by --db (else COVEN_DB, else the default); nothing when
    # coven cannot read them.
    _coven_file_ids() {
        local db=${opt_args[--db]:-$_coven_db} expl
        local -a args ids
        db=${(Q)db}
        [[ $db == '~/'* ]] && db=$HOME/${db#'~/'}
        args=(sql)
        [[ -n $db ]] && args+=(--db "$db")
        ids=(${(0)"$(command coven "${args[@]}" -z 'SELECT id FROM coven_files' 2>/dev/null)"})
        _wanted file-ids expl 'file id' compadd -a ids
    }

    if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
        _coven "$@"
    else
        compdef _coven coven
    fi

    """#
}
