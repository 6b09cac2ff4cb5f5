#include "cli/line_reader.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#ifdef DEEPINFER_WITH_LIBEDIT
#include <histedit.h>
#endif

namespace di::cli {

struct LineReader::Impl {
    std::string prompt;
#ifdef DEEPINFER_WITH_LIBEDIT
    EditLine* el = nullptr;
    History* hist = nullptr;
    HistEvent ev{};

    static const char* prompt_of(EditLine* el) {
        void* self = nullptr;
        el_get(el, EL_CLIENTDATA, &self);
        return static_cast<Impl*>(self)->prompt.c_str();
    }
#endif
};

LineReader::LineReader(std::string prompt) : impl_(std::make_unique<Impl>()) {
    impl_->prompt = std::move(prompt);
#ifdef DEEPINFER_WITH_LIBEDIT
    if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO)) return;
    impl_->el = el_init("deepinfer", stdin, stderr, stderr);
    if (!impl_->el) return;
    impl_->hist = history_init();
    history(impl_->hist, &impl_->ev, H_SETSIZE, 1000);
    history(impl_->hist, &impl_->ev, H_SETUNIQUE, 1);
    el_set(impl_->el, EL_CLIENTDATA, impl_.get());
    el_set(impl_->el, EL_PROMPT, &Impl::prompt_of);
    el_set(impl_->el, EL_EDITOR, "emacs");
    el_set(impl_->el, EL_HIST, history, impl_->hist);
    el_source(impl_->el, nullptr);  // the user's ~/.editrc, if any
#endif
}

LineReader::~LineReader() {
#ifdef DEEPINFER_WITH_LIBEDIT
    if (impl_->el) el_end(impl_->el);
    if (impl_->hist) history_end(impl_->hist);
#endif
}

bool LineReader::read(std::string& line) {
#ifdef DEEPINFER_WITH_LIBEDIT
    if (impl_->el) {
        int count = 0;
        const char* s = el_gets(impl_->el, &count);
        if (!s || count <= 0) return false;
        line.assign(s, size_t(count));
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        if (!line.empty()) history(impl_->hist, &impl_->ev, H_ENTER, line.c_str());
        return true;
    }
#endif
    std::fputs(impl_->prompt.c_str(), stderr);
    std::fflush(stderr);
    return static_cast<bool>(std::getline(std::cin, line));
}

}  // namespace di::cli
