package main

// int80 makes a system call through the 32-bit (i386) entry point.
func int80(trap, a1, a2, a3 uintptr) uintptr

// i386Keyctl is keyctl in the i386 system call table.
const i386Keyctl = 288

const haveInt80 = true
